"""The simulator's webhook sender: batched, signed, sometimes duplicated or reordered."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import random
import threading
import time
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter

from messaging.webhooks import SIGNATURE_HEADER, sign

log = logging.getLogger(__name__)


class WebhookSettings(Protocol):
    """Read on every POST, so they can change while the simulator runs."""

    webhook_url: str | None
    app_secret: str | None
    duplicate_rate: float
    shuffle: bool


class WebhookDeliveryError(Exception):
    pass


class WebhookSender:
    """Posts the simulator's webhooks from one background thread.

    1. `schedule` queues a status update with a due time; it never blocks on the network.
    2. Every `flush_interval` the due updates are grouped per business account (one
       `changes[]` item per number), up to `batch_size` a POST, signed and queued to post.
    3. A POST is queued a second time with probability `duplicate_rate`; with `shuffle`,
       updates inside a batch are shuffled and some POSTs are held back a little, so they
       arrive after later ones (the platform keeps no order either).
    4. A failed POST is retried `max_attempts` times in all, with growing delays.
    """

    max_attempts = 4
    timeout = (2.0, 5.0)

    def __init__(
        self,
        settings: WebhookSettings,
        *,
        batch_size: int = 100,
        flush_interval: float = 0.05,
        seed: int | None = None,
    ) -> None:
        self.settings = settings
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.posted = 0  # POSTs answered 2xx
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._seq = itertools.count()
        # Heaps ordered by due time, then arrival.
        self._statuses: list[tuple[float, int, str, dict[str, str], dict[str, Any]]] = []
        self._posts: list[tuple[float, int, bytes, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: requests.Session | None = None

    def start(self) -> None:
        self._stop.clear()
        session = requests.Session()
        # The targets are local services; environment proxies would only get in the way.
        session.trust_env = False
        adapter = HTTPAdapter(pool_connections=2, pool_maxsize=2, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        self._session = session
        self._thread = threading.Thread(target=self._run, name="sim-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._session is not None:
            self._session.close()
            self._session = None
        with self._lock:
            self._statuses.clear()
            self._posts.clear()

    def schedule(
        self, due: float, waba_id: str, metadata: dict[str, str], status: dict[str, Any]
    ) -> None:
        """Queue one status update of the number described by `metadata` (monotonic `due`)."""
        with self._lock:
            heapq.heappush(self._statuses, (due, next(self._seq), waba_id, metadata, status))

    def post_later(self, waba_id: str, field_name: str, value: dict[str, Any]) -> None:
        if self.settings.webhook_url:
            self._queue_post(time.monotonic(), notification(waba_id, [(field_name, value)]))

    def post_now(self, waba_id: str, field_name: str, value: dict[str, Any]) -> int:
        """Post one webhook from the calling thread; return the receiver's HTTP status."""
        url = self.settings.webhook_url
        if not url:
            raise WebhookDeliveryError("no webhook_url is configured")
        body = notification(waba_id, [(field_name, value)])
        try:
            response = requests.post(url, data=body, headers=self._headers(body),
                                     timeout=self.timeout)
        except requests.RequestException as exc:
            raise WebhookDeliveryError(f"webhook POST to {url} failed ({type(exc).__name__})") from exc
        if response.status_code >= 300:
            raise WebhookDeliveryError(f"webhook POST to {url} answered {response.status_code}")
        return response.status_code

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self._flush(time.monotonic())
            except Exception:  # one bad POST must not end the sender
                log.exception("simulator webhook sender failed")

    def _flush(self, now: float) -> None:
        settings = self.settings
        for body in self._due_batches(now):
            held_back = settings.shuffle and self._random.random() < 0.3
            self._queue_post(now + (self._random.uniform(0.05, 0.3) if held_back else 0), body)
            if self._random.random() < settings.duplicate_rate:
                self._queue_post(now + self._random.uniform(0.0, 0.2), body)
        while not self._stop.is_set():
            with self._lock:
                if not self._posts or self._posts[0][0] > now:
                    return
                _, _, body, attempt = heapq.heappop(self._posts)
            self._deliver(body, attempt)

    def _due_batches(self, now: float) -> list[bytes]:
        due: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        with self._lock:
            while self._statuses and self._statuses[0][0] <= now:
                _, _, waba_id, metadata, status = heapq.heappop(self._statuses)
                due.append((waba_id, metadata, status))
        if self.settings.shuffle:
            self._random.shuffle(due)
        return [
            status_notification(due[start:start + self.batch_size])
            for start in range(0, len(due), self.batch_size)
        ]

    def _queue_post(self, due: float, body: bytes, attempt: int = 0) -> None:
        with self._lock:
            heapq.heappush(self._posts, (due, next(self._seq), body, attempt))

    def _deliver(self, body: bytes, attempt: int) -> None:
        url = self.settings.webhook_url
        if not url or self._session is None:
            return
        try:
            response = self._session.post(
                url, data=body, headers=self._headers(body), timeout=self.timeout
            )
            problem = None if response.status_code < 300 else f"HTTP {response.status_code}"
        except requests.RequestException as exc:
            problem = str(exc)
        if problem is None:
            self.posted += 1
        elif attempt + 1 < self.max_attempts:
            self._queue_post(time.monotonic() + 0.2 * 4**attempt, body, attempt + 1)
        else:
            log.warning("simulator gave up posting a webhook to %s: %s", url, problem)

    def _headers(self, body: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.settings.app_secret:
            headers[SIGNATURE_HEADER] = sign(body, self.settings.app_secret)
        return headers


def notification(waba_id: str, changes: list[tuple[str, dict[str, Any]]]) -> bytes:
    """A webhook body with one entry holding `(field, value)` changes."""
    entry = {"id": waba_id, "changes": [{"field": f, "value": v} for f, v in changes]}
    return _encode({"object": "whatsapp_business_account", "entry": [entry]})


def status_notification(items: list[tuple[str, dict[str, str], dict[str, Any]]]) -> bytes:
    """One entry per business account, one `messages` change per number."""
    grouped: dict[str, dict[str, tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]]]]] = {}
    for waba_id, metadata, scheduled in items:
        status = dict(scheduled)
        contact = status.pop("_contact", None)
        per_number = grouped.setdefault(waba_id, {})
        _, statuses, contacts = per_number.setdefault(metadata["phone_number_id"], (metadata, [], []))
        statuses.append(status)
        if contact is not None:
            # One entry per status, in the same order: the recipient of each.
            contacts.append(contact)
    entries = [
        {
            "id": waba_id,
            "changes": [
                {
                    "field": "messages",
                    "value": {
                        "messaging_product": "whatsapp",
                        "metadata": metadata,
                        **({"contacts": contacts} if contacts else {}),
                        "statuses": statuses,
                    },
                }
                for metadata, statuses, contacts in per_number.values()
            ],
        }
        for waba_id, per_number in grouped.items()
    ]
    return _encode({"object": "whatsapp_business_account", "entry": entries})


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()
