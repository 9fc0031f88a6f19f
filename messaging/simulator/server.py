"""A local stand-in for the messaging platform (the Graph API subset the service uses).

A real HTTP server on 127.0.0.1 that answers with the platform's JSON success and error
envelopes under the Graph versions the platform serves (`SERVED_GRAPH_VERSIONS`; a retired one
is answered by the oldest served, as Graph does), and posts signed status, inbound and echo
webhooks to the service. State is in memory, guarded by one lock; with a data dir it is also
kept on disk (messaging/simulator/state_files.py) and read back at start, so a restart is an outage, not a
new platform.

Graph API endpoints:

    GET  /{v}/oauth/access_token?client_id&client_secret&code   token exchange (code is single use)
    GET  /{v}/{phone_number_id}?fields=...                       phone number info
    POST /{v}/{phone_number_id}/messages                          send
    POST /{v}/{phone_number_id}/smb_app_data                      coexistence sync (once per type)
    GET  /{v}/{waba_id}/message_templates?limit&after             cursor-paged templates
    GET  /{v}/{waba_id}/phone_numbers                             the account's numbers
    GET|POST /{v}/{waba_id}/subscribed_apps                       webhook subscription

Control endpoints (no version prefix), all JSON:

    GET    /_sim/health          numbers, sends kept, sends throttled past a number's cap
    POST   /_sim/signup          {display_phone_number?, verified_name?, mps?} -> {code, waba_id,
                                 phone_number_id, display_phone_number}
    GET    /_sim/numbers         every number (its token only in process: Simulator.numbers())
    POST   /_sim/numbers/{id}    {mps?, quality_rating?, messaging_limit_tier?, blocked?}
    POST   /_sim/templates       {name, language, status?, category?, body?, header?, buttons?}
                                 buttons: [{type: URL, text, url (a dynamic one ends in {{1}})}
                                 | {type: QUICK_REPLY, text}]; a body or buttons given for an
                                 existing template replace its components (an edit)
    GET    /_sim/sent            every accepted send (with a template's components); DELETE clears
    GET    /_sim/reads           every mark-as-read call (message_id, typing)
    POST   /_sim/inbound         {from | user_id, to: phone_number_id, text, name?}
    POST   /_sim/press           {wamid, index}: the user presses quick-reply button `index` of an
                                 accepted template send; the `button` message names it in `context`
    POST   /_sim/echo            {from: phone_number_id, to: wa_id | user_id, text}
    POST   /_sim/fail            {mode: "500"|"timeout"|"off", seconds?, hang?}
    GET|POST /_sim/config        webhook_url, app_secret (set only; GET says app_secret_set), delivery
                                 delays, duplicate_rate, shuffle
    POST   /_sim/reset           forget numbers, codes, template changes, sends and failure modes

Users: every phone number has a stable business-scoped user id (`user_id_for`); a send may name
the user by `to` (phone) or `recipient` (business-scoped id); webhooks carry `user_id` and a
`contacts` entry (statuses too), `wa_id` only for users who share their phone, and a username for
users whose key ends in 7. `POST /_sim/inbound` takes `user_id` instead of `from` for a username
user without a phone. Mark-as-read (`status: read`, `message_id`, optional typing indicator) has no
`to`. `POST /_sim/numbers/{id}` `{blocked: 368 | 131042 | null}` makes every send of the number
refused with that code (business account restricted, payment problem) until lifted.
`smb_app_data` (each sync type once per number) posts the business app's contacts
(`smb_app_state_sync`) and chats (`history`, in chunks): `business_app_contacts` names them.

Choices where the platform varies: throttling (130429) is answered with HTTP 400, as the
platform's error-code reference lists it, so callers must decide on `error.code`; a send
that hangs in "timeout" mode is still accepted once the hang ends, as the real platform
may accept a message whose answer the caller never saw.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from messaging.client import GRAPH_VERSION, template_variable_count
from messaging.simulator.httpserver import DropConnection, JSONHTTPServer, Request
from messaging.simulator.state_files import SimStateFiles
from messaging.simulator.webhook_sender import WebhookDeliveryError, WebhookSender

log = logging.getLogger(__name__)

DEFAULT_WABA_ID = "102290129340398"
DEFAULT_MPS = 20.0
TIERS = ("TIER_250", "TIER_2K", "TIER_10K", "TIER_100K", "TIER_UNLIMITED")
QUALITY_RATINGS = ("GREEN", "YELLOW", "RED", "UNKNOWN")
SEND_TYPES = frozenset(
    {"text", "template", "image", "video", "audio", "document", "sticker", "interactive",
     "location", "contacts", "reaction"}
)

_VERSION_PREFIX = re.compile(r"^/(v\d+\.\d+)/")

# The Graph API versions the platform serves on 2026-11-25. Each is served for two years after
# the next one comes out (developers.facebook.com/docs/graph-api/changelog/versions): v21.0 until
# 2027-01-21, v22.0 until 2027-05-20, v23.0 until 2027-10-08, v24.0 until 2028-02-18, v25.0
# until 2028-07-29, v26.0 (released 2026-07-29) until two years after v27.0. Update this set as
# versions come and go, so that the simulator answers a stale SVC_GRAPH_VERSION as Graph does.
SERVED_GRAPH_VERSIONS = ("v21.0", "v22.0", "v23.0", "v24.0", "v25.0", "v26.0")
# Every version Graph released before those (v1.0, v2.0 to v2.12, v3.0 to v3.3, v4.0 to v20.0).
# Graph answers a call to one of them with the oldest version it still serves ("once a version is
# no longer usable, any calls made to it will be defaulted to the next oldest usable version");
# a version it never released is a path it does not know (error 2500).
RETIRED_GRAPH_VERSIONS = frozenset(
    ["v1.0", *(f"v2.{minor}" for minor in range(13)), *(f"v3.{minor}" for minor in range(4)),
     *(f"v{major}.0" for major in range(4, 21))])


class GraphError(Exception):
    """An error the simulator answers in the Graph envelope."""

    def __init__(
        self,
        http_status: int,
        code: int,
        message: str,
        details: str | None = None,
        subcode: int | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message
        self.details = details
        self.subcode = subcode

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.message,
            "type": "OAuthException",
            "code": self.code,
        }
        if self.details is not None:
            error["error_data"] = {"messaging_product": "whatsapp", "details": self.details}
        if self.subcode is not None:
            error["error_subcode"] = self.subcode
        error["fbtrace_id"] = secrets.token_urlsafe(16)
        return {"error": error}


class ControlError(Exception):
    """A bad request to a `/_sim/` endpoint."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message


class ThroughputWindow:
    """A number's cap, held strictly: at most `rate` sends in any one-second window.

    A sliding log of the last second's acceptances; nothing is banked while the number is idle,
    so there is no burst beyond the cap. (Below one message a second: one per 1/rate seconds.)
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.accepted: deque[float] = deque()

    @property
    def limit(self) -> int:
        return max(1, int(self.rate))

    def take(self) -> bool:
        now = time.monotonic()
        span = self.limit / self.rate  # one second for a whole-number rate
        while self.accepted and now - self.accepted[0] >= span:
            self.accepted.popleft()
        if len(self.accepted) >= self.limit:
            return False
        self.accepted.append(now)
        return True

    def set_rate(self, rate: float) -> None:
        self.rate = rate


@dataclass
class SimNumber:
    id: str
    waba_id: str
    display_phone_number: str
    verified_name: str
    token: str
    bucket: ThroughputWindow
    quality_rating: str = "GREEN"
    messaging_limit_tier: str = "TIER_250"
    synced: set[str] = field(default_factory=set)
    blocked: int | None = None  # 368 or 131042: the business account may send nothing

    def graph_fields(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "display_phone_number": self.display_phone_number,
            "verified_name": self.verified_name,
            "quality_rating": self.quality_rating,
            "messaging_limit_tier": self.messaging_limit_tier,
            "status": "CONNECTED",
            "platform_type": "CLOUD_API",
            "code_verification_status": "VERIFIED",
            "is_on_biz_app": True,
            "throughput": {"level": "STANDARD"},
        }

    def public(self) -> dict[str, Any]:
        return {
            **self.graph_fields(),
            "waba_id": self.waba_id,
            "token": self.token,
            "mps": self.bucket.rate,
        }

    def metadata(self) -> dict[str, str]:
        return {
            "display_phone_number": _digits(self.display_phone_number),
            "phone_number_id": self.id,
        }

    def saved(self) -> dict[str, Any]:
        return {
            "id": self.id, "waba_id": self.waba_id, "display_phone_number": self.display_phone_number,
            "verified_name": self.verified_name, "token": self.token, "mps": self.bucket.rate,
            "quality_rating": self.quality_rating, "messaging_limit_tier": self.messaging_limit_tier,
            "synced": sorted(self.synced), "blocked": self.blocked,
        }

    @classmethod
    def restored(cls, saved: dict[str, Any]) -> SimNumber:
        fields = {name: saved[name] for name in ("id", "waba_id", "display_phone_number", "verified_name",
                                                 "token", "quality_rating", "messaging_limit_tier")}
        # A state file written before blocks were kept has no "blocked": the number was not blocked.
        return cls(**fields, bucket=ThroughputWindow(float(saved["mps"])), synced=set(saved["synced"]),
                   blocked=saved.get("blocked"))


def builtin_templates() -> list[dict[str, Any]]:
    """The built-in business account's templates, in the Graph shape."""

    def body(text: str, *example: str) -> dict[str, Any]:
        component: dict[str, Any] = {"type": "BODY", "text": text}
        if example:
            component["example"] = {"body_text": [list(example)]}
        return component

    image_header = {
        "type": "HEADER",
        "format": "IMAGE",
        "example": {"header_handle": ["https://example.com/order.jpg"]},
    }
    rows = [
        ("hello_world", "en_US", "APPROVED", "UTILITY", [body("Hello World")]),
        (
            "payment_reminder",
            "es",
            "APPROVED",
            "UTILITY",
            [body("Hola {{1}}, tu saldo pendiente es {{2}}.", "Ana", "$150.00")],
        ),
        (
            "order_update",
            "en_US",
            "APPROVED",
            "MARKETING",
            [image_header, body("Your order {{1}} has shipped", "#1001")],
        ),
        ("promo_pending", "en_US", "PENDING", "MARKETING", [body("New deals {{1}}", "50% off")]),
    ]
    return [
        _template(f"{1500000000000000 + index}", name, language, status, category, components)
        for index, (name, language, status, category, components) in enumerate(rows, start=1)
    ]


def _template(
    template_id: str,
    name: str,
    language: str,
    status: str,
    category: str,
    components: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": template_id,
        "name": name,
        "language": language,
        "status": status,
        "category": category,
        "parameter_format": "POSITIONAL",
        "quality_score": {"score": "GREEN" if status == "APPROVED" else "UNKNOWN", "date": int(time.time())},
        "components": components,
    }


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
        self.waba_id = DEFAULT_WABA_ID
        self.webhook_url = webhook_url
        self.app_secret = app_secret
        self.default_mps = float(mps)
        self.delivered_delay = delivered_delay
        self.read_delay = read_delay
        self.duplicate_rate = duplicate_rate
        self.shuffle = shuffle

        self._lock = threading.Lock()
        self._numbers: dict[str, SimNumber] = {}
        self._tokens: dict[str, str] = {}  # token -> phone_number_id
        self._codes: dict[str, str | None] = {}  # code -> token; None once used
        self._templates = builtin_templates()
        self._subscribed = False
        self._throttled_once: set[str] = set()
        self._sent: deque[dict[str, Any]] = deque(maxlen=sent_limit)
        self._reads: deque[dict[str, Any]] = deque(maxlen=10_000)  # mark-as-read calls, in memory only
        self._throttled = 0  # sends refused past a number's cap, since the start or the last reset
        self._fail_mode = "off"
        self._fail_until = 0.0
        self._hang = 12.0
        self._serial = 0  # numbers ever signed up: ids never repeat, across resets and restarts
        self._stopping = threading.Event()
        self._server: JSONHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.webhooks = WebhookSender(
            self, batch_size=batch_size, flush_interval=flush_interval, seed=seed
        )
        # On disk: what changed is written every `save_interval` seconds by one thread, so a send
        # only adds its record to a list; stopping writes the rest.
        self._files = SimStateFiles(data_dir) if data_dir else None
        self._save_interval = save_interval
        self._save_lock = threading.Lock()
        self._saver: threading.Thread | None = None
        self._changed = False  # state to write
        self._unsaved_sent: list[dict[str, Any]] = []
        self._sent_cleared = False  # the sent file starts over
        if self._files is not None:
            self._restore()

    # Lifecycle

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("simulator is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

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
        self._stopping.clear()
        self._server = JSONHTTPServer((self.host, self.port), self.handle_http)
        self.webhooks.start()
        if self._files is not None:
            self._saver = threading.Thread(target=self._save_until_stopped, name="sim-state", daemon=True)
            self._saver.start()

    def _close(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        self.webhooks.stop()
        if self._saver is not None:
            self._saver.join(timeout=10)
            self._saver = None
        self.save()

    # State on disk

    def _restore(self) -> None:
        assert self._files is not None
        state = self._files.load_state()
        sent = self._files.load_sent()
        with self._lock:
            if state is not None:
                self._serial = state["serial"]
                self._numbers = {saved["id"]: SimNumber.restored(saved) for saved in state["numbers"]}
                self._tokens = {number.token: number.id for number in self._numbers.values()}
                self._codes = state["codes"]
                self._templates = state["templates"]
                self._subscribed = state["subscribed"]
                self._throttled_once = set(state["throttled_once"])
            self._sent.extend(sent)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "serial": self._serial,
            "numbers": [number.saved() for number in self._numbers.values()],
            "codes": dict(self._codes),
            "templates": json.loads(json.dumps(self._templates)),
            "subscribed": self._subscribed,
            "throttled_once": sorted(self._throttled_once),
        }

    def save(self) -> None:
        """Write what changed since the last save (nothing without a data dir)."""
        if self._files is None:
            return
        with self._save_lock:
            with self._lock:
                state = self._snapshot() if self._changed else None
                cleared, sent = self._sent_cleared, self._unsaved_sent
                self._changed, self._sent_cleared, self._unsaved_sent = False, False, []
            try:
                if state is not None:
                    self._files.save_state(state)
                if cleared:
                    self._files.rewrite_sent(sent)
                elif sent:
                    self._files.append_sent(sent)
                if self._sent.maxlen and self._files.sent_lines > 2 * self._sent.maxlen:
                    with self._lock:
                        kept = list(self._sent)
                    self._files.rewrite_sent(kept)
            except OSError:
                log.exception("simulator state not saved to %s; trying again", self._files.dir)
                with self._lock:
                    self._changed = self._changed or state is not None
                    self._sent_cleared = self._sent_cleared or cleared
                    self._unsaved_sent = sent + self._unsaved_sent

    def _save_until_stopped(self) -> None:
        while not self._stopping.wait(self._save_interval):
            self.save()

    def reset(self) -> dict[str, Any]:
        """Forget every number, code, template change, send, throttle and failure mode."""
        with self._lock:
            self._numbers, self._tokens, self._codes = {}, {}, {}
            self._templates = builtin_templates()
            self._subscribed = False
            self._throttled_once.clear()
            self._sent.clear()
            self._reads.clear()
            self._throttled = 0
            self._fail_mode, self._fail_until = "off", 0.0
            self._changed, self._sent_cleared, self._unsaved_sent = True, True, []
        return {"reset": True}

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Operations, shared by the control endpoints and in-process callers

    def signup(
        self,
        display_phone_number: str | None = None,
        verified_name: str | None = None,
        mps: float | None = None,
    ) -> dict[str, str]:
        """Simulate embedded signup: a new coexistence number and a one-time code."""
        with self._lock:
            self._serial += 1
            serial = self._serial
            number = SimNumber(
                id=str(106540352242000 + serial),
                waba_id=self.waba_id,
                display_phone_number=display_phone_number or f"+1 555-010-{serial:04d}",
                verified_name=verified_name or f"Sim Business {serial}",
                token="EAAG" + secrets.token_hex(24),
                bucket=ThroughputWindow(float(mps) if mps is not None else self.default_mps),
            )
            code = "simcode-" + secrets.token_urlsafe(24)
            self._numbers[number.id] = number
            self._tokens[number.token] = number.id
            self._codes[code] = number.token
            self._changed = True
        return {
            "code": code,
            "waba_id": number.waba_id,
            "phone_number_id": number.id,
            "display_phone_number": number.display_phone_number,
        }

    def new_code(self, phone_number_id: str) -> str:
        """A fresh one-time code for a number the simulator has (the business reconnects it)."""
        number = self._control_number(phone_number_id)
        code = "simcode-" + secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = number.token
            self._changed = True
        return code

    def numbers(self) -> list[dict[str, Any]]:
        with self._lock:
            return [number.public() for number in self._numbers.values()]

    def set_number(
        self,
        phone_number_id: str,
        mps: float | None = None,
        quality_rating: str | None = None,
        messaging_limit_tier: str | None = None,
        blocked: int | None | bool = False,
    ) -> dict[str, Any]:
        """Change a number's cap, quality, tier or block (368, 131042, or None to lift it; False
        leaves it); quality and tier changes are notified."""
        if blocked not in (False, None, 368, 131042):
            raise ControlError(400, "blocked must be 368, 131042 or null")
        if quality_rating is not None and quality_rating not in QUALITY_RATINGS:
            raise ControlError(400, f"quality_rating must be one of {', '.join(QUALITY_RATINGS)}")
        if messaging_limit_tier is not None and messaging_limit_tier not in TIERS:
            raise ControlError(400, f"messaging_limit_tier must be one of {', '.join(TIERS)}")
        if mps is not None and not float(mps) > 0:
            raise ControlError(400, "mps must be positive")
        with self._lock:
            number = self._numbers.get(phone_number_id)
            if number is None:
                raise ControlError(404, f"unknown phone number {phone_number_id}")
            event = _quality_event(number, quality_rating, messaging_limit_tier)
            if mps is not None:
                number.bucket.set_rate(float(mps))
            number.quality_rating = quality_rating or number.quality_rating
            number.messaging_limit_tier = messaging_limit_tier or number.messaging_limit_tier
            if blocked is not False:
                number.blocked = blocked
            result = number.public()
            self._changed = True
        if event is not None:
            value = {
                "display_phone_number": _digits(number.display_phone_number),
                "event": event,
                "current_limit": number.messaging_limit_tier,
            }
            self.webhooks.post_later(number.waba_id, "phone_number_quality_update", value)
        return result

    def set_template(
        self,
        name: str,
        language: str,
        status: str = "APPROVED",
        category: str = "UTILITY",
        body: str | None = None,
        header: str | None = None,
        reason: str | None = None,
        buttons: list[Any] | None = None,
    ) -> dict[str, Any]:
        """Add a template, or change one's status (notified like the platform does); a `body` or
        `buttons` given for an existing template replace its components, as an edit in the
        business's template manager does."""
        status = status.upper()
        template_buttons = _template_buttons(buttons) if buttons is not None else None
        with self._lock:
            template = self._find_template(name, language)
            if template is None:
                if body is None:
                    raise ControlError(400, "a new template needs a body")
                template = _template(
                    str(1500000000000000 + len(self._templates) + 1),
                    name, language, status, category.upper(),
                    _components(body, header, template_buttons),
                )
                self._templates.append(template)
                changed = True
            else:
                changed = template["status"] != status
                template["status"] = status
                if body is not None or template_buttons is not None:
                    current = _graph_body(template) if body is None else body
                    if current is None:
                        raise ControlError(400, "the template has no body to keep")
                    kept_header = header or next((c.get("format") for c in template["components"]
                                                  if c.get("type") == "HEADER"), None)
                    template["components"] = _components(current, kept_header, template_buttons)
            snapshot = json.loads(json.dumps(template))
            self._changed = True
        if changed:
            value = {
                "event": status,
                "message_template_id": int(snapshot["id"]),
                "message_template_name": name,
                "message_template_language": language,
                "reason": reason,
            }
            self.webhooks.post_later(self.waba_id, "message_template_status_update", value)
        return snapshot

    def sent(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._sent)

    def reads(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._reads)

    def clear_sent(self) -> None:
        with self._lock:
            self._sent.clear()
            self._sent_cleared, self._unsaved_sent = True, []

    def fail(self, mode: str, seconds: float = 60.0, hang: float | None = None) -> None:
        """Make sends answer 500 ("500") or hang ("timeout") for `seconds`; "off" ends it."""
        if mode not in ("500", "timeout", "off"):
            raise ControlError(400, 'mode must be "500", "timeout" or "off"')
        with self._lock:
            self._fail_mode = mode
            self._fail_until = time.monotonic() + float(seconds)
            if hang is not None:
                self._hang = float(hang)

    def configure(self, **options: Any) -> dict[str, Any]:
        allowed = {
            "webhook_url", "app_secret", "default_mps", "delivered_delay", "read_delay",
            "duplicate_rate", "shuffle",
        }
        unknown = set(options) - allowed
        if unknown:
            raise ControlError(400, f"unknown option(s): {', '.join(sorted(unknown))}")
        for name, value in options.items():
            setattr(self, name, value)
        return self.config()

    def config(self) -> dict[str, Any]:
        return {
            "waba_id": self.waba_id,
            "webhook_url": self.webhook_url,
            # Whether webhooks are signed, never the secret: this endpoint answers anyone.
            "app_secret_set": bool(self.app_secret),
            "default_mps": self.default_mps,
            "delivered_delay": self.delivered_delay,
            "read_delay": self.read_delay,
            "duplicate_rate": self.duplicate_rate,
            "shuffle": self.shuffle,
        }

    def inbound(self, from_wa_id: str | None, phone_number_id: str, text: str, name: str | None = None,
                user_id: str | None = None) -> dict[str, Any]:
        """A customer writes to a number: post a `messages` webhook now. A user given only by
        `user_id` (a username user who does not share their phone) comes without `from`."""
        number = self._control_number(phone_number_id)
        wa_id, user_id = _user_ids(from_wa_id, user_id)
        wamid = _wamid(wa_id or _digits(user_id))
        message: dict[str, Any] = {"from_user_id": user_id, "id": wamid,
                                   "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}
        if wa_id:
            message = {"from": wa_id, **message}
        value = {
            "messaging_product": "whatsapp",
            "metadata": number.metadata(),
            "contacts": [sim_contact(wa_id, user_id, name)],
            "messages": [message],
        }
        return {"wamid": wamid, "user_id": user_id,
                "webhook_status": self._post_now(number, "messages", value)}

    def press(self, wamid: str, index: int) -> dict[str, Any]:
        """The user presses a quick-reply button of a template message they got: a `button`
        message whose payload is the one the send gave that button (the button's text without
        one), replying to (`context`) the template message."""
        with self._lock:
            record = next((item for item in self._sent if item["wamid"] == wamid), None)
            template = self._find_template(record["template"], record["language"]) if record else None
        if record is None or template is None:
            raise ControlError(404, f"no accepted template send {wamid}")
        declared = next((c.get("buttons") or [] for c in template["components"] if c.get("type") == "BUTTONS"), [])
        if not 0 <= index < len(declared) or declared[index]["type"] != "QUICK_REPLY":
            raise ControlError(400, f"the template {record['template']} has no quick-reply button at index {index}")
        payload = declared[index]["text"]
        for component in record["components"] or []:
            if component.get("type") == "button" and str(component.get("index")) == str(index):
                payload = component["parameters"][0]["payload"]
        number = self._control_number(record["phone_number_id"])
        wa_id, user_id = _user_ids(record["to"] if record["to"] != record["recipient"] else None, record["recipient"])
        reply = _wamid(wa_id or _digits(user_id))
        message: dict[str, Any] = {
            "context": {"from": _digits(number.display_phone_number), "id": wamid},
            "from_user_id": user_id, "id": reply, "timestamp": str(int(time.time())), "type": "button",
            "button": {"payload": payload, "text": declared[index]["text"]}}
        if wa_id:
            message = {"from": wa_id, **message}
        value = {"messaging_product": "whatsapp", "metadata": number.metadata(),
                 "contacts": [sim_contact(wa_id, user_id)], "messages": [message]}
        return {"wamid": reply, "payload": payload, "webhook_status": self._post_now(number, "messages", value)}

    def echo(self, phone_number_id: str, to_wa_id: str | None, text: str,
             user_id: str | None = None) -> dict[str, Any]:
        """The business replies from its own app: post a `smb_message_echoes` webhook now."""
        number = self._control_number(phone_number_id)
        wa_id, user_id = _user_ids(to_wa_id, user_id)
        wamid = _wamid(wa_id or _digits(user_id))
        echo: dict[str, Any] = {"from": _digits(number.display_phone_number), "to_user_id": user_id, "id": wamid,
                                "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}
        if wa_id:
            echo["to"] = wa_id
        value = {
            "messaging_product": "whatsapp",
            "metadata": number.metadata(),
            "contacts": [sim_contact(wa_id, user_id)],
            "message_echoes": [echo],
        }
        status = self._post_now(number, "smb_message_echoes", value)
        return {"wamid": wamid, "webhook_status": status}

    def _post_now(self, number: SimNumber, field_name: str, value: dict[str, Any]) -> int:
        if not self.webhook_url:
            raise ControlError(409, "no webhook_url is configured in the simulator")
        try:
            return self.webhooks.post_now(number.waba_id, field_name, value)
        except WebhookDeliveryError as exc:
            raise ControlError(502, str(exc)) from exc

    def health(self) -> dict[str, Any]:
        with self._lock:
            return {
                "status": "ok",
                "waba_id": self.waba_id,
                "numbers": len(self._numbers),
                "sent": len(self._sent),
                "throttled": self._throttled,
            }

    def _control_number(self, phone_number_id: str) -> SimNumber:
        with self._lock:
            number = self._numbers.get(str(phone_number_id))
        if number is None:
            raise ControlError(404, f"unknown phone number {phone_number_id}")
        return number

    # HTTP

    def handle_http(self, request: Request) -> tuple[int, Any]:
        url = urlsplit(request.target)
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError:
            return _error_response(GraphError(400, 100, "(#100) Invalid JSON body"))
        try:
            if url.path.startswith("/_sim/"):
                try:
                    return 200, self.handle_control(request.method, url.path, body)
                except (TypeError, ValueError) as exc:  # e.g. {"mps": "fast"}
                    raise ControlError(400, f"invalid request: {exc}") from exc
            match = _VERSION_PREFIX.match(url.path)
            version = served_version(match.group(1)) if match is not None else None
            if match is None or version is None:
                raise GraphError(400, 2500, f"Unknown path components: {url.path}")
            return 200, self.handle_graph(
                request.method,
                url.path[match.end():],
                dict(parse_qsl(url.query)),
                body,
                request.headers.get("authorization"),
                version=version,
            )
        except (GraphError, ControlError) as exc:
            return _error_response(exc)
        except DropConnection:
            raise
        except Exception:
            log.exception("simulator failed on %s %s", request.method, request.target)
            return _error_response(GraphError(500, 1, "An unknown error has occurred."))

    # Graph API

    def handle_graph(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        body: Any,
        authorization: str | None,
        version: str = GRAPH_VERSION,
    ) -> dict[str, Any]:
        """Answer one Graph API call (`path` without the `/{version}/` prefix)."""
        parts = [part for part in path.split("/") if part]
        if method == "GET" and parts == ["oauth", "access_token"]:
            return self._exchange_code(query)
        if len(parts) == 1 and method == "GET":
            return self._get_phone_number(self._number_for(parts[0], authorization), query)
        if len(parts) == 2:
            object_id, edge = parts
            if edge == "messages" and method == "POST":
                return self._send(self._number_for(object_id, authorization), body)
            if edge == "smb_app_data" and method == "POST":
                return self._sync(self._number_for(object_id, authorization), body)
            if edge == "message_templates" and method == "GET":
                self._authorize_waba(object_id, authorization)
                return self._list_templates(object_id, query, version)
            if edge == "phone_numbers" and method == "GET":
                self._authorize_waba(object_id, authorization)
                with self._lock:
                    data = [n.graph_fields() for n in self._numbers.values()]
                return {"data": data}
            if edge == "subscribed_apps":
                self._authorize_waba(object_id, authorization)
                return self._subscribed_apps(method)
        raise GraphError(
            400, 100, f"Unsupported {method.lower()} request.", subcode=33,
            details=f"no {method} /{'/'.join(parts)} in this simulator",
        )

    def _exchange_code(self, query: Mapping[str, str]) -> dict[str, Any]:
        secret = query.get("client_secret")
        if self.app_secret and secret and secret != self.app_secret:
            raise GraphError(400, 1, "Error validating client secret.", subcode=404)
        code = query.get("code", "")
        with self._lock:
            if code not in self._codes:
                raise GraphError(400, 100, "Invalid verification code format.", subcode=36007)
            token = self._codes[code]
            if token is None:
                raise GraphError(400, 100, "This authorization code has been used.", subcode=36009)
            self._codes[code] = None
            self._changed = True
        return {"access_token": token, "token_type": "bearer"}

    def _token_number(self, authorization: str | None) -> SimNumber:
        token = ""
        if authorization and authorization.startswith("Bearer "):
            token = authorization[len("Bearer "):].strip()
        with self._lock:
            number_id = self._tokens.get(token)
            number = self._numbers.get(number_id) if number_id else None
        if number is None:
            raise GraphError(401, 190, "Invalid OAuth access token - Cannot parse access token")
        return number

    def _number_for(self, object_id: str, authorization: str | None) -> SimNumber:
        number = self._token_number(authorization)
        if number.id != object_id:
            raise GraphError(
                400, 100,
                f"Unsupported post request. Object with ID '{object_id}' does not exist, cannot "
                "be loaded due to missing permissions, or does not support this operation.",
                subcode=33,
            )
        return number

    def _authorize_waba(self, waba_id: str, authorization: str | None) -> None:
        number = self._token_number(authorization)
        if number.waba_id != waba_id:
            raise GraphError(
                400, 100,
                f"Unsupported get request. Object with ID '{waba_id}' does not exist, cannot be "
                "loaded due to missing permissions, or does not support this operation.",
                subcode=33,
            )

    def _get_phone_number(self, number: SimNumber, query: Mapping[str, str]) -> dict[str, Any]:
        with self._lock:
            fields = number.graph_fields()
        wanted = [name for name in query.get("fields", "").split(",") if name]
        if not wanted:
            return fields
        return {"id": number.id, **{name: fields[name] for name in wanted if name in fields}}

    def _list_templates(
        self, waba_id: str, query: Mapping[str, str], version: str
    ) -> dict[str, Any]:
        limit = max(1, min(_int(query.get("limit"), 25), 1000))
        start = _decode_cursor(query.get("after")) if query.get("after") else 0
        with self._lock:
            page = json.loads(json.dumps(self._templates[start:start + limit]))
            total = len(self._templates)
        for template in page:
            # Positional `{{1}}` placeholders, as the platform names them (named ones are `{{name}}`);
            # a template kept from before the field was listed gets it too.
            template.setdefault("parameter_format", "POSITIONAL")
            template["quality_score"].setdefault("date", int(time.time()))
        result: dict[str, Any] = {"data": page}
        summary = [name for name in query.get("summary", "").split(",") if name]
        if summary:
            counts = {"total_count": total, "message_template_count": total, "message_template_limit": 250,
                      "are_translations_complete": True}
            result["summary"] = {name: counts[name] for name in summary if name in counts}
        if page:
            end = start + len(page)
            result["paging"] = {
                "cursors": {"before": _encode_cursor(start), "after": _encode_cursor(end)}
            }
            if end < total:
                next_query = {**query, "limit": str(limit), "after": _encode_cursor(end)}
                result["paging"]["next"] = (
                    f"{self.base_url}/{version}/{waba_id}/message_templates?{urlencode(next_query)}"
                )
        return result

    def _subscribed_apps(self, method: str) -> dict[str, Any]:
        if method == "POST":
            with self._lock:
                self._subscribed = True
                self._changed = True
            return {"success": True}
        with self._lock:
            subscribed = self._subscribed
        app = {"whatsapp_business_api_data": {"id": "1000000000001", "name": "Simulator App"}}
        return {"data": [app] if subscribed else []}

    def _sync(self, number: SimNumber, body: Any) -> dict[str, Any]:
        sync_type = body.get("sync_type") if isinstance(body, dict) else None
        if sync_type not in ("smb_app_state_sync", "history"):
            raise GraphError(400, 100, "(#100) Invalid parameter", details="sync_type is invalid")
        with self._lock:
            if sync_type in number.synced:
                raise GraphError(
                    400, 100, "(#100) Invalid parameter",
                    details=f"{sync_type} was already requested for this phone number; "
                    "it can run only once",
                )
            number.synced.add(sync_type)
            self._changed = True
        for value in business_app_webhooks(number, sync_type):
            self.webhooks.post_later(number.waba_id, sync_type, value)
        return {"messaging_product": "whatsapp", "request_id": secrets.token_hex(16)}

    def _send(self, number: SimNumber, body: Any) -> dict[str, Any]:
        self._apply_failure_mode()
        if isinstance(body, dict) and body.get("status") == "read":
            answer = _mark_read(body)
            with self._lock:
                self._reads.append({"phone_number_id": number.id, "message_id": body["message_id"],
                                    "typing": body.get("typing_indicator") is not None})
            return answer
        message = _validate_message(body)
        self._check_blocked(number)
        wa_id, user_id = _recipient(message)
        # The behaviours by suffix, throttling and wamids go by the phone, or the id's digits.
        to = wa_id or _digits(user_id)
        template = name = language = None
        if message["type"] == "template":
            name = message["template"]["name"]
            language = message["template"]["language"]["code"]
            with self._lock:
                template = self._find_template(name, language)
            _check_template(template, message["template"])
        with self._lock:
            if not number.bucket.take():
                self._throttled += 1
                raise GraphError(
                    400, 130429, "(#130429) Rate limit hit",
                    details="Cloud API message throughput has been reached.",
                )
            # Taken with the window's own check: `/_sim/sent` shows the times the cap counted.
            accepted_at = datetime.now(UTC)
            if to.endswith("0429") and to not in self._throttled_once:
                self._throttled_once.add(to)
                self._changed = True
                raise GraphError(
                    400, 130429, "(#130429) Rate limit hit",
                    details="Cloud API message throughput has been reached.",
                )
        if to.endswith("0000"):
            raise GraphError(
                400, 131026, "(#131026) Message Undeliverable.",
                details="Message Undeliverable.",
            )

        wamid = _wamid(to)
        callback_data = message.get("biz_opaque_callback_data")
        record = {
            "to": wa_id or user_id,
            "recipient": user_id,
            "type": message["type"],
            "template": name,
            "language": language,
            "components": (message.get("template") or {}).get("components"),
            "biz_opaque_callback_data": callback_data,
            "wamid": wamid,
            "phone_number_id": number.id,
            "at": accepted_at.isoformat(),
        }
        with self._lock:
            self._sent.append(record)
            if self._files is not None:
                self._unsaved_sent.append(record)
        self._schedule_statuses(number, wamid, to, callback_data, template, sim_contact(wa_id, user_id))
        result: dict[str, Any] = {"id": wamid}
        if template is not None:
            result["message_status"] = "accepted"
        contact: dict[str, Any] = {"input": message.get("to") or message["recipient"], "user_id": user_id}
        if wa_id:
            contact["wa_id"] = wa_id
        return {"messaging_product": "whatsapp", "contacts": [contact], "messages": [result]}

    @staticmethod
    def _check_blocked(number: SimNumber) -> None:
        if number.blocked == 368:
            raise GraphError(400, 368, "(#368) Temporarily blocked for policies violations",
                             details="The business account is restricted from messaging for a policy violation.")
        if number.blocked == 131042:
            raise GraphError(400, 131042, "(#131042) Business eligibility payment issue",
                             details="There was an error related to your payment method.")

    def _apply_failure_mode(self) -> None:
        with self._lock:
            active = self._fail_mode != "off" and time.monotonic() < self._fail_until
            mode, hang = self._fail_mode, self._hang
        if not active:
            return
        if mode == "500":
            raise GraphError(
                500, 131000, "(#131000) Something went wrong",
                details="The simulator is set to fail sends.",
            )
        # "timeout": hang past the caller's timeout, then carry on and accept the message.
        if self._stopping.wait(hang):
            raise DropConnection

    def _find_template(self, name: Any, language: Any) -> dict[str, Any] | None:
        for template in self._templates:
            if template["name"] == name and template["language"] == language:
                return template
        return None

    def _schedule_statuses(
        self,
        number: SimNumber,
        wamid: str,
        to: str,
        callback_data: str | None,
        template: dict[str, Any] | None,
        contact: dict[str, Any],
    ) -> None:
        if not self.webhook_url:
            return
        now = time.monotonic()
        metadata = number.metadata()
        category = str(template["category"]).lower() if template else "service"

        def status(name: str, **extra: Any) -> dict[str, Any]:
            item: dict[str, Any] = {
                "id": wamid,
                "status": name,
                "timestamp": str(int(time.time())),
                "recipient_user_id": contact["user_id"],
                # Taken out into the value's `contacts` when the batch is posted.
                "_contact": contact,
            }
            if contact.get("wa_id"):
                item["recipient_id"] = contact["wa_id"]
            if callback_data is not None:
                item["biz_opaque_callback_data"] = callback_data
            item.update(extra)
            return item

        if to.endswith("9999"):
            failure = {
                "code": 131026,
                "title": "Message undeliverable",
                "message": "Message undeliverable",
                "error_data": {"details": "The recipient could not be reached."},
            }
            self.webhooks.schedule(
                now + self.delivered_delay, number.waba_id, metadata,
                status("failed", errors=[failure]),
            )
            return
        conversation = {
            "id": secrets.token_hex(16),
            "origin": {"type": category},
        }
        pricing = {"billable": category != "service", "pricing_model": "PMP",
                   "type": "regular" if category != "service" else "free_customer_service",
                   "category": category}
        delivered = status("delivered", conversation=conversation, pricing=pricing)
        self.webhooks.schedule(now + self.delivered_delay, number.waba_id, metadata, delivered)
        self.webhooks.schedule(now + self.read_delay, number.waba_id, metadata,
                               status("read", pricing=pricing))

    # Control endpoints

    def handle_control(self, method: str, path: str, body: Any) -> Any:
        parts = [part for part in path.split("/") if part][1:]  # drop "_sim"
        args = body if isinstance(body, dict) else {}
        route = (method, parts[0] if parts else "")
        if route == ("GET", "health"):
            return self.health()
        if route == ("POST", "signup"):
            return self.signup(
                args.get("display_phone_number"), args.get("verified_name"), args.get("mps")
            )
        if route == ("GET", "numbers") and len(parts) == 1:
            # Over HTTP without their tokens: this endpoint answers anyone who can reach it.
            return {"data": [{key: value for key, value in number.items() if key != "token"}
                             for number in self.numbers()]}
        if route == ("POST", "numbers") and len(parts) == 2:
            return self.set_number(
                parts[1], args.get("mps"), args.get("quality_rating"),
                args.get("messaging_limit_tier"), args.get("blocked", False),
            )
        if route == ("POST", "templates"):
            _require(args, "name", "language")
            options = {k: args[k] for k in ("status", "category", "body", "header", "reason", "buttons")
                       if args.get(k) is not None}
            return self.set_template(args["name"], args["language"], **options)
        if route == ("GET", "sent"):
            return {"data": self.sent()}
        if route == ("GET", "reads"):
            return {"data": self.reads()}
        if route == ("DELETE", "sent"):
            self.clear_sent()
            return {"deleted": True}
        if route == ("POST", "inbound"):
            _require(args, "to", "text")
            return self.inbound(_opt_str(args.get("from")), str(args["to"]), str(args["text"]),
                                args.get("name"), _opt_str(args.get("user_id")))
        if route == ("POST", "press"):
            _require(args, "wamid", "index")
            if not isinstance(args["index"], int):
                raise ControlError(400, "index must be an integer")
            return self.press(str(args["wamid"]), args["index"])
        if route == ("POST", "echo"):
            _require(args, "from", "text")
            return self.echo(str(args["from"]), _opt_str(args.get("to")), str(args["text"]),
                             _opt_str(args.get("user_id")))
        if route == ("POST", "fail"):
            _require(args, "mode")
            self.fail(str(args["mode"]), float(args.get("seconds", 60)), args.get("hang"))
            return {"mode": args["mode"]}
        if route == ("POST", "reset"):
            return self.reset()
        if route == ("GET", "config"):
            return self.config()
        if route == ("POST", "config"):
            return self.configure(**args)
        raise ControlError(404, f"no {method} {path} in this simulator")


def _mark_read(body: dict[str, Any]) -> dict[str, Any]:
    """Mark-as-read (with a typing indicator when asked): no `to`, the message id names the chat."""
    if body.get("messaging_product") != "whatsapp":
        raise GraphError(400, 100, "(#100) The parameter messaging_product is required.")
    if not isinstance(body.get("message_id"), str) or not body["message_id"].startswith("wamid."):
        raise GraphError(400, 100, "(#100) The parameter message_id is required.")
    typing = body.get("typing_indicator")
    if typing is not None and (not isinstance(typing, dict) or typing.get("type") != "text"):
        raise GraphError(400, 100, "(#100) Invalid parameter", details="typing_indicator.type must be text")
    return {"success": True}


def _recipient(message: dict[str, Any]) -> tuple[str | None, str]:
    """The phone number (None for a send by business-scoped id) and the user id of a send."""
    recipient = message.get("recipient")
    if isinstance(recipient, str) and recipient:
        if not BSUID.match(recipient):
            raise GraphError(400, 100, "(#100) Invalid parameter",
                             details="recipient must be a business-scoped user id")
        return None, recipient
    wa_id = _digits(message["to"])
    return wa_id, user_id_for(wa_id)


def _validate_message(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise GraphError(400, 100, "(#100) Invalid parameter", details="body must be JSON")
    if body.get("messaging_product") != "whatsapp":
        raise GraphError(400, 100, "(#100) The parameter messaging_product is required.")
    has_to = isinstance(body.get("to"), str) and bool(_digits(body["to"]))
    if not has_to and not (isinstance(body.get("recipient"), str) and body["recipient"]):
        raise GraphError(400, 100, "(#100) The parameter to is required.")
    kind = body.setdefault("type", "text")
    if kind not in SEND_TYPES:
        raise GraphError(
            400, 100, "(#100) Invalid parameter", details=f"type {kind!r} is not supported"
        )
    if not isinstance(body.get(kind), dict):
        raise GraphError(400, 100, f"(#100) The parameter {kind} is required.")
    if kind == "text" and not body["text"].get("body"):
        raise GraphError(400, 100, "(#100) The parameter text['body'] is required.")
    if kind == "template":
        template = body["template"]
        if not isinstance(template.get("name"), str):
            raise GraphError(400, 100, "(#100) The parameter template['name'] is required.")
        language = template.get("language")
        if not isinstance(language, dict) or not isinstance(language.get("code"), str):
            raise GraphError(
                400, 100, "(#100) The parameter template['language']['code'] is required."
            )
    return body


def _check_template(template: dict[str, Any] | None, requested: dict[str, Any]) -> None:
    name, language = requested["name"], requested["language"]["code"]
    if template is None or template["status"] != "APPROVED":
        state = "does not exist" if template is None else f"is {template['status']}"
        raise GraphError(
            404, 132001, "(#132001) Template name does not exist in the translation",
            details=f"template name ({name}) {state} in {language}",
        )
    requested_components = [c for c in requested.get("components") or [] if isinstance(c, dict)]
    sent = {str(c.get("type", "")).lower(): c for c in requested_components
            if str(c.get("type", "")).lower() != "button"}
    body_component = next(c for c in template["components"] if c["type"] == "BODY")
    expected = template_variable_count(body_component.get("text"))
    given = len((sent.get("body") or {}).get("parameters") or [])
    if given != expected:
        raise GraphError(
            400, 132000,
            "(#132000) Number of parameters does not match the expected number of params",
            details=f"body: number of localizable_params ({given}) does not match the "
            f"expected number of params ({expected})",
        )
    _check_buttons(template, [c for c in requested_components
                              if str(c.get("type", "")).lower() == "button"])
    header = next((c for c in template["components"] if c["type"] == "HEADER"), None)
    if header and header.get("format") in ("IMAGE", "VIDEO", "DOCUMENT"):
        parameters = (sent.get("header") or {}).get("parameters") or [{}]
        received = str(parameters[0].get("type", "unknown")).upper()
        if received != header["format"]:
            raise GraphError(
                400, 132012,
                "(#132012) Parameter format does not match format in the created template",
                details=f"header: Format mismatch, expected {header['format']}, "
                f"received {received}",
            )


# Template buttons: a URL button whose URL ends in `{{1}}` takes its suffix at send time (one
# `text` parameter); a quick-reply button may take a `payload` (returned when it is pressed).
# A URL without `{{1}}` is fixed and takes nothing.
BUTTON_TYPES = ("URL", "QUICK_REPLY")
MAX_TEMPLATE_BUTTONS = 10
MAX_BUTTON_TEXT = 25
MAX_BUTTON_URL = 2000
DYNAMIC_SUFFIX = "{{1}}"


def _template_buttons(buttons: Any) -> list[dict[str, Any]]:
    """Buttons declared through `POST /_sim/templates`, in the Graph shape."""
    if not isinstance(buttons, list) or not 1 <= len(buttons) <= MAX_TEMPLATE_BUTTONS:
        raise ControlError(400, f"buttons must be a list of 1 to {MAX_TEMPLATE_BUTTONS}")
    shaped = []
    for index, button in enumerate(buttons):
        if not isinstance(button, dict):
            raise ControlError(400, f"buttons[{index}] must be an object")
        kind = str(button.get("type", "")).upper()
        text = button.get("text")
        if kind not in BUTTON_TYPES:
            raise ControlError(400, f"buttons[{index}].type must be URL or QUICK_REPLY")
        if not isinstance(text, str) or not 1 <= len(text) <= MAX_BUTTON_TEXT:
            raise ControlError(400, f"buttons[{index}].text must be 1 to {MAX_BUTTON_TEXT} characters")
        item: dict[str, Any] = {"type": kind, "text": text}
        if kind == "URL":
            url = button.get("url")
            if not isinstance(url, str) or not re.match(r"^https?://[^\s/?#]+", url) \
                    or len(url) > MAX_BUTTON_URL or DYNAMIC_SUFFIX in url[:-len(DYNAMIC_SUFFIX)]:
                raise ControlError(400, f"buttons[{index}].url must be an http(s) URL, with {{{{1}}}} "
                                        "only at its end")
            item["url"] = url
            if url.endswith(DYNAMIC_SUFFIX):
                example = button.get("example")
                item["example"] = [str(example[0]) if isinstance(example, list) and example
                                   else url[:-len(DYNAMIC_SUFFIX)] + "example"]
        shaped.append(item)
    return shaped


def _components(body: str, header: str | None, buttons: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    components: list[dict[str, Any]] = []
    if header:
        components.append({"type": "HEADER", "format": header.upper()})
    body_component: dict[str, Any] = {"type": "BODY", "text": body}
    count = template_variable_count(body)
    if count:
        # The platform approves a body with variables only with an example for each.
        body_component["example"] = {"body_text": [[f"example {n}" for n in range(1, count + 1)]]}
    components.append(body_component)
    if buttons:
        components.append({"type": "BUTTONS", "buttons": buttons})
    return components


def _graph_body(template: dict[str, Any]) -> str | None:
    return next((c.get("text") for c in template["components"] if c.get("type") == "BODY"), None)


def _check_buttons(template: dict[str, Any], sent: list[dict[str, Any]]) -> None:
    """Button parameters against the template's buttons, as the platform checks them: a dynamic
    URL button without its suffix, or a parameter for a button that takes none, is a count
    mismatch (132000); a parameter of the wrong kind, or for a button the template does not
    have, is refused as a bad parameter (132018)."""
    declared = next((c.get("buttons") or [] for c in template["components"] if c.get("type") == "BUTTONS"), [])
    by_index: dict[int, dict[str, Any]] = {}
    for component in sent:
        try:
            index = int(component.get("index"))
        except (TypeError, ValueError):
            raise _bad_button_parameter("button: index must be a number") from None
        if index in by_index:
            raise _bad_button_parameter(f"button at index {index}: given twice")
        if not 0 <= index < len(declared):
            raise _bad_button_parameter(f"button at index {index}: the template has no such button")
        by_index[index] = component
    for index, button in enumerate(declared):
        component = by_index.get(index)
        dynamic = button["type"] == "URL" and str(button.get("url", "")).endswith(DYNAMIC_SUFFIX)
        parameters = (component or {}).get("parameters") or []
        expected = 1 if dynamic else 0
        if button["type"] == "QUICK_REPLY" and component is not None:
            expected = 1  # a payload is optional, but a component given for it must carry one
        if len(parameters) != expected:
            raise GraphError(
                400, 132000,
                "(#132000) Number of parameters does not match the expected number of params",
                details=f"button at index {index}: number of localizable_params ({len(parameters)}) "
                f"does not match the expected number of params ({expected})",
            )
        if component is None:
            continue
        sub_type = str(component.get("sub_type", "")).lower()
        parameter = parameters[0] if isinstance(parameters[0], dict) else {}
        if button["type"] == "URL":
            suffix = parameter.get("text")
            if sub_type != "url" or parameter.get("type") != "text" or not isinstance(suffix, str) or not suffix:
                raise _bad_button_parameter(f"button at index {index}: a URL button takes a text parameter")
            url = button["url"][:-len(DYNAMIC_SUFFIX)] + suffix
            if len(url) > MAX_BUTTON_URL:
                raise _bad_button_parameter(f"button at index {index}: the URL is longer than {MAX_BUTTON_URL}")
        elif sub_type != "quick_reply" or parameter.get("type") != "payload" \
                or not isinstance(parameter.get("payload"), str):
            raise _bad_button_parameter(f"button at index {index}: a quick-reply button takes a payload parameter")


def _bad_button_parameter(details: str) -> GraphError:
    return GraphError(400, 132018, "(#132018) There was an issue with the parameters in your template.",
                      details=details)


def _quality_event(
    number: SimNumber, quality_rating: str | None, tier: str | None
) -> str | None:
    if tier is not None and tier != number.messaging_limit_tier:
        return "UPGRADE" if TIERS.index(tier) > TIERS.index(number.messaging_limit_tier) \
            else "DOWNGRADE"
    if quality_rating is not None and quality_rating != number.quality_rating:
        if quality_rating == "RED":
            return "FLAGGED"
        if number.quality_rating == "RED":
            return "UNFLAGGED"
    return None


def served_version(asked: str) -> str | None:
    """The Graph version that answers a call made to `asked`: itself while served, the oldest
    served one for a retired version, None for a version Graph never released."""
    if asked in SERVED_GRAPH_VERSIONS:
        return asked
    if asked in RETIRED_GRAPH_VERSIONS:
        return SERVED_GRAPH_VERSIONS[0]
    return None


def _error_response(exc: GraphError | ControlError) -> tuple[int, Any]:
    if isinstance(exc, GraphError):
        return exc.http_status, exc.envelope()
    return exc.http_status, {"error": {"message": exc.message}}


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


def business_app_contacts(phone_number_id: str) -> list[tuple[str, str]]:
    """The simulated business app's contacts of a number: (phone, name), stable per number."""
    base = phone_number_id[-6:]
    return [(f"52155{base}{i}1", f"App Contact {i}") for i in range(1, 4)]


def business_app_webhooks(number: SimNumber, sync_type: str) -> list[dict[str, Any]]:
    """What a coexistence sync delivers: the app's contacts in one `smb_app_state_sync` webhook;
    its chats in `history` chunks (the first contact wrote an hour ago and was answered), the
    last chunk sent twice, as the platform may."""
    now = int(time.time())
    contacts = business_app_contacts(number.id)
    base = {"messaging_product": "whatsapp", "metadata": number.metadata()}
    if sync_type == "smb_app_state_sync":
        return [{**base, "state_sync": [
            {"type": "contact", "contact": {"full_name": name, "first_name": name.split()[0], "phone_number": phone},
             "action": "add", "metadata": {"timestamp": str(now)}} for phone, name in contacts]}]
    business = _digits(number.display_phone_number)
    chunks = []
    for order, (phone, _) in enumerate(contacts[:2], start=1):
        wrote = now - 3600 if order == 1 else now - 3 * 86400
        messages = [
            {"from": phone, "id": _wamid(phone), "timestamp": str(wrote), "type": "text",
             "text": {"body": "Hola, ¿cuánto debo?"}, "history_context": {"status": "READ"}},
            {"from": business, "to": phone, "id": _wamid(phone), "timestamp": str(wrote + 60), "type": "text",
             "text": {"body": "Te aviso enseguida"}, "history_context": {"status": "DELIVERED"}},
        ]
        chunks.append({**base, "history": [{"metadata": {"phase": 0, "chunk_order": order, "progress": 50 * order},
                                            "threads": [{"id": phone, "messages": messages}]}]})
    return [*chunks, chunks[-1]]


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _user_ids(wa_id: str | None, user_id: str | None) -> tuple[str | None, str]:
    """A simulated user by phone number, business-scoped id or both."""
    if wa_id is None and user_id is None:
        raise ControlError(400, "from (a phone number) or user_id is required")
    if user_id is not None and not BSUID.match(user_id):
        raise ControlError(400, f"user_id {user_id!r} is not a business-scoped user id (CC.digits)")
    wa_id = _digits(wa_id) if wa_id else None
    return wa_id, user_id or user_id_for(wa_id or "")


def _require(args: Mapping[str, Any], *names: str) -> None:
    missing = [name for name in names if args.get(name) in (None, "")]
    if missing:
        raise ControlError(400, f"missing field(s): {', '.join(missing)}")


def _digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


BSUID = re.compile(r"^[A-Z]{2}\.(?:ENT\.)?[A-Za-z0-9]{1,128}$")


def user_id_for(wa_id: str) -> str:
    """The simulated business-scoped user id of a phone number: stable, and ending in the
    number's last four digits so the behaviours by suffix hold for it too."""
    digest = hashlib.sha256(f"bsuid:{wa_id}".encode()).hexdigest()
    return f"US.{int(digest[:12], 16):015d}{wa_id[-4:]}"


def username_for(key: str) -> str | None:
    """About one simulated user in ten (key ending in 7) has a username."""
    digits = _digits(key)
    return f"@user{digits[-6:]}" if digits.endswith("7") else None


def sim_contact(wa_id: str | None, user_id: str, name: str | None = None) -> dict[str, Any]:
    """A `contacts` entry as the platform sends it: `wa_id` only when the user shares it."""
    profile: dict[str, Any] = {"name": name or "Sim Customer"}
    username = username_for(user_id if wa_id is None else wa_id)
    if username:
        profile["username"] = username
    contact: dict[str, Any] = {"profile": profile, "user_id": user_id}
    if wa_id:
        contact["wa_id"] = wa_id
    return contact


def _wamid(to: str) -> str:
    raw = f"{to[-12:]}{secrets.token_hex(10).upper()}".encode()
    return "wamid.HBgL" + base64.b64encode(raw).decode().rstrip("=")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _encode_cursor(index: int) -> str:
    return base64.urlsafe_b64encode(f"idx:{index}".encode()).decode()


def _decode_cursor(cursor: str) -> int:
    try:
        return max(0, int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1]))
    except (ValueError, IndexError, UnicodeDecodeError):
        raise GraphError(400, 100, "(#100) Invalid cursor") from None
