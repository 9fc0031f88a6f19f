"""Test helpers: a local endpoint that records the webhooks the simulator posts."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from messaging.webhooks import SIGNATURE_HEADER, Update, parse_notification


@dataclass(frozen=True)
class ReceivedPost:
    path: str
    signature: str | None
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """Records every POST; answers the scripted `statuses` first, then 200."""

    def __init__(self, statuses: Iterable[int] = ()) -> None:
        self.posts: list[ReceivedPost] = []  # the POSTs answered 2xx
        self.attempts = 0  # every POST, whatever it was answered
        self._answers = deque(statuses)
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._changed:
                    receiver.attempts += 1
                    status = receiver._answers.popleft() if receiver._answers else 200
                    if status < 300:
                        post = ReceivedPost(self.path, self.headers.get(SIGNATURE_HEADER), body)
                        receiver.posts.append(post)
                    receiver._changed.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/platform/webhook"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def updates(self) -> list[Update]:
        """Every update of every accepted POST, duplicates included."""
        with self._changed:
            posts = list(self.posts)
        return [update for post in posts for update in parse_notification(post.json())]

    def wait_for(self, condition: Callable[[WebhookReceiver], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"webhooks did not arrive in {timeout} s: {self.posts!r}")
                self._changed.wait(remaining)
