"""The simulator as one server: its parts wired together, the HTTP entry that hands each request
to the Graph API (`graph`) or to the control endpoints (`control`), and the operations tests call
in process. `svcctl sim` runs `serve_forever`.

A real HTTP server on 127.0.0.1 that answers with the platform's JSON success and error envelopes
under the Graph versions the platform serves (a retired one is answered by the oldest served, as
Graph does), and posts signed status, inbound and echo webhooks to the service.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from messaging.simulator import control, customers, graph, messages, onboarding, phone_numbers, templates
from messaging.simulator.errors import ControlError, GraphError, error_response
from messaging.simulator.httpserver import DropConnection, JSONHTTPServer, Request
from messaging.simulator.platform import DEFAULT_MPS, Platform, Settings
from messaging.simulator.state import PlatformState
from messaging.simulator.state_files import StateFiles
from messaging.simulator.webhook_sender import WebhookSender

log = logging.getLogger(__name__)


class Simulator:
    """The platform simulator: `start()` in a background thread or `serve_forever()`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        webhook_url: str | None = None,
        app_secret: str | None = None,
        mps: float = DEFAULT_MPS,
        delivered_delay: float = 0.05,
        read_delay: float = 0.1,
        review_delay: float = 0.5,
        duplicate_rate: float = 0.02,
        shuffle: bool = False,
        batch_size: int = 100,
        flush_interval: float = 0.05,
        sent_limit: int = 500_000,
        seed: int | None = None,
        data_dir: str | Path | None = None,
        save_interval: float = 0.2,
    ) -> None:
        self.host = host
        self.port = port
        settings = Settings(
            webhook_url=webhook_url, app_secret=app_secret, default_mps=float(mps),
            delivered_delay=delivered_delay, read_delay=read_delay, duplicate_rate=duplicate_rate,
            shuffle=shuffle, review_delay=review_delay,
        )
        self.platform = Platform(
            state=PlatformState(sent_limit=sent_limit, files=StateFiles(data_dir) if data_dir else None,
                                save_interval=save_interval),
            settings=settings,
            webhooks=WebhookSender(settings, batch_size=batch_size, flush_interval=flush_interval, seed=seed),
            stopping=threading.Event(),
        )
        self._server: JSONHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._base_url = ""

    # Lifecycle

    @property
    def waba_id(self) -> str:
        return self.platform.state.waba_id

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("simulator is not running")
        return self._base_url

    def start(self) -> str:
        """Serve in a background thread; return the base URL."""
        self._bind()
        assert self._server is not None
        # A short poll interval keeps stop() quick (it waits for one poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="sim-http", daemon=True
        )
        self._thread.start()
        return self.base_url

    def serve_forever(self, on_ready: Callable[[Simulator], None] | None = None) -> None:
        """Serve in this thread until interrupted; `on_ready` runs once the port is bound."""
        self._bind()
        assert self._server is not None
        try:
            if on_ready is not None:
                on_ready(self)
            self._server.serve_forever()
        finally:
            self._close()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._close()

    def _bind(self) -> None:
        self.platform.stopping.clear()
        self._server = JSONHTTPServer((self.host, self.port), self.handle_http)
        host, port = self._server.server_address[:2]
        self._base_url = f"http://{host}:{port}"
        self.platform.webhooks.start()
        self.platform.state.start_saving(self.platform.stopping)

    def _close(self) -> None:
        self.platform.stopping.set()
        if self._server is not None:
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        self.platform.webhooks.stop()
        self.platform.state.stop_saving()

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # HTTP

    def handle_http(self, request: Request) -> tuple[int, Any]:
        url = urlsplit(request.target)
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError:
            return error_response(GraphError(400, 100, "(#100) Invalid JSON body"))
        try:
            if url.path.startswith("/_sim/"):
                return 200, control.handle(self.platform, request.method, url.path, body)
            match = graph.VERSION_PREFIX.match(url.path)
            version = graph.served_version(match.group(1)) if match is not None else None
            if match is None or version is None:
                raise GraphError(400, 2500, f"Unknown path components: {url.path}")
            return 200, graph.handle(
                self.platform,
                request.method,
                url.path[match.end():],
                dict(parse_qsl(url.query)),
                body,
                request.headers.get("authorization"),
                version=version,
                base_url=self._base_url,
            )
        except (GraphError, ControlError) as exc:
            return error_response(exc)
        except DropConnection:
            raise
        except Exception:
            log.exception("simulator failed on %s %s", request.method, request.target)
            return error_response(GraphError(500, 1, "An unknown error has occurred."))

    # Operations in process: the ones the control endpoints call, documented where they live

    def signup(
        self, display_phone_number: str | None = None, verified_name: str | None = None, mps: float | None = None
    ) -> dict[str, str]:
        return onboarding.signup(self.platform, display_phone_number, verified_name, mps)

    def new_code(self, phone_number_id: str) -> str:
        return onboarding.new_code(self.platform.state, phone_number_id)

    def numbers(self) -> list[dict[str, Any]]:
        """Every number, with its token."""
        return phone_numbers.every_number(self.platform.state)

    def set_number(self, phone_number_id: str, **changes: Any) -> dict[str, Any]:
        """`changes`: mps, quality_rating, messaging_limit_tier, blocked."""
        return phone_numbers.set_number(self.platform, phone_number_id, **changes)

    def set_template(self, name: str, language: str, **options: Any) -> dict[str, Any]:
        """`options`: status, category, body, header, reason, buttons."""
        return templates.set_template(self.platform, name, language, **options)

    def sent(self) -> list[dict[str, Any]]:
        return self.platform.state.sent_records()

    def reads(self) -> list[dict[str, Any]]:
        return self.platform.state.read_records()

    def clear_sent(self) -> None:
        self.platform.state.clear_sent()

    def fail(self, mode: str, seconds: float = 60.0, hang: float | None = None) -> None:
        messages.fail(self.platform.state, mode, seconds, hang)

    def configure(self, **options: Any) -> dict[str, Any]:
        self.platform.settings.configure(**options)
        return self.config()

    def config(self) -> dict[str, Any]:
        return self.platform.config()

    def inbound(self, from_wa_id: str | None, phone_number_id: str, text: str, name: str | None = None,
                user_id: str | None = None) -> dict[str, Any]:
        return customers.inbound(self.platform, from_wa_id, phone_number_id, text, name, user_id)

    def press(self, wamid: str, index: int) -> dict[str, Any]:
        return customers.press(self.platform, wamid, index)

    def echo(self, phone_number_id: str, to_wa_id: str | None, text: str,
             user_id: str | None = None) -> dict[str, Any]:
        return customers.echo(self.platform, phone_number_id, to_wa_id, text, user_id)

    def health(self) -> dict[str, Any]:
        return self.platform.state.health()

    def reset(self) -> dict[str, Any]:
        return self.platform.state.reset()

    def save(self) -> None:
        self.platform.state.save()


def serve_forever(
    bind: str = "127.0.0.1:8090",
    webhook_url: str | None = None,
    app_secret: str | None = None,
    mps: float = DEFAULT_MPS,
    on_ready: Callable[[Simulator], None] | None = None,
    **options: Any,
) -> None:
    """Run a simulator in the foreground (the `svcctl sim` command)."""
    host, port = parse_bind(bind)
    sim = Simulator(host, port, webhook_url=webhook_url, app_secret=app_secret, mps=mps, **options)
    sim.serve_forever(on_ready)


def parse_bind(bind: str) -> tuple[str, int]:
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind must be HOST:PORT, not {bind!r}")
    return host or "127.0.0.1", int(port)
