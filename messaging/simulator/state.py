"""What the simulated platform knows, under one lock; with a data dir, also kept on disk
(`state_files`) and read back at start, so a restart is an outage, not a new platform."""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from typing import Any

from messaging.simulator.errors import ControlError
from messaging.simulator.records import DEFAULT_WABA_ID, SimNumber, builtin_templates
from messaging.simulator.state_files import StateFiles

log = logging.getLogger(__name__)


class PlatformState:
    """Numbers, tokens, codes, templates, the app's subscription, accepted sends and reads.

    Every field is read and changed under `lock`. Whoever changes what is saved (anything but
    the sends, reads, counters and outage) sets `changed`; a send is saved by `record_send`.
    On disk, what changed is written every `save_interval` seconds by one thread, so a send only
    adds its record to a list; stopping writes the rest.
    """

    def __init__(self, *, sent_limit: int, files: StateFiles | None, save_interval: float) -> None:
        self.lock = threading.Lock()
        self.waba_id = DEFAULT_WABA_ID
        self.numbers: dict[str, SimNumber] = {}
        self.tokens: dict[str, str] = {}  # token -> phone_number_id
        self.codes: dict[str, str | None] = {}  # code -> token; None once used
        self.templates = builtin_templates()
        self.subscribed = False
        self.throttled_once: set[str] = set()
        self.sent: deque[dict[str, Any]] = deque(maxlen=sent_limit)
        self.reads: deque[dict[str, Any]] = deque(maxlen=10_000)  # mark-as-read calls, in memory only
        self.throttled = 0  # sends refused past a number's cap, since the start or the last reset
        # The outage `POST /_sim/fail` sets: sends answer 500 or hang until `fail_until`.
        self.fail_mode = "off"
        self.fail_until = 0.0
        self.hang = 12.0
        self.serial = 0  # numbers ever signed up: ids never repeat, across resets and restarts
        self.changed = False  # state to write

        self._files = files
        self._save_interval = save_interval
        self._save_lock = threading.Lock()
        self._saver: threading.Thread | None = None
        self._unsaved_sent: list[dict[str, Any]] = []
        self._sent_cleared = False  # the sent file starts over
        if files is not None:
            self._restore(files)

    # Reading and changing

    def find_template(self, name: Any, language: Any) -> dict[str, Any] | None:
        """The account's template of that name and language (the caller holds the lock)."""
        for template in self.templates:
            if template["name"] == name and template["language"] == language:
                return template
        return None

    def known_number(self, phone_number_id: str) -> SimNumber:
        """A number a control endpoint names: 404 when the platform has none of that id."""
        with self.lock:
            number = self.numbers.get(str(phone_number_id))
        if number is None:
            raise ControlError(404, f"unknown phone number {phone_number_id}")
        return number

    def record_send(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.sent.append(record)
            if self._files is not None:
                self._unsaved_sent.append(record)

    def sent_records(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.sent)

    def read_records(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.reads)

    def clear_sent(self) -> None:
        with self.lock:
            self.sent.clear()
            self._sent_cleared, self._unsaved_sent = True, []

    def health(self) -> dict[str, Any]:
        with self.lock:
            return {
                "status": "ok",
                "waba_id": self.waba_id,
                "numbers": len(self.numbers),
                "sent": len(self.sent),
                "throttled": self.throttled,
            }

    def reset(self) -> dict[str, Any]:
        """Forget every number, code, template change, send, throttle and failure mode."""
        with self.lock:
            self.numbers, self.tokens, self.codes = {}, {}, {}
            self.templates = builtin_templates()
            self.subscribed = False
            self.throttled_once.clear()
            self.sent.clear()
            self.reads.clear()
            self.throttled = 0
            self.fail_mode, self.fail_until = "off", 0.0
            self.changed, self._sent_cleared, self._unsaved_sent = True, True, []
        return {"reset": True}

    # On disk

    def _restore(self, files: StateFiles) -> None:
        state = files.load_state()
        sent = files.load_sent()
        with self.lock:
            if state is not None:
                self.serial = state["serial"]
                self.numbers = {saved["id"]: SimNumber.restored(saved) for saved in state["numbers"]}
                self.tokens = {number.token: number.id for number in self.numbers.values()}
                self.codes = state["codes"]
                self.templates = state["templates"]
                self.subscribed = state["subscribed"]
                self.throttled_once = set(state["throttled_once"])
            self.sent.extend(sent)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "serial": self.serial,
            "numbers": [number.saved() for number in self.numbers.values()],
            "codes": dict(self.codes),
            "templates": json.loads(json.dumps(self.templates)),
            "subscribed": self.subscribed,
            "throttled_once": sorted(self.throttled_once),
        }

    def save(self) -> None:
        """Write what changed since the last save (nothing without a data dir)."""
        if self._files is None:
            return
        with self._save_lock:
            with self.lock:
                state = self._snapshot() if self.changed else None
                cleared, sent = self._sent_cleared, self._unsaved_sent
                self.changed, self._sent_cleared, self._unsaved_sent = False, False, []
            try:
                if state is not None:
                    self._files.save_state(state)
                if cleared:
                    self._files.rewrite_sent(sent)
                elif sent:
                    self._files.append_sent(sent)
                if self.sent.maxlen and self._files.sent_lines > 2 * self.sent.maxlen:
                    with self.lock:
                        kept = list(self.sent)
                    self._files.rewrite_sent(kept)
            except OSError:
                log.exception("simulator state not saved to %s; trying again", self._files.dir)
                with self.lock:
                    self.changed = self.changed or state is not None
                    self._sent_cleared = self._sent_cleared or cleared
                    self._unsaved_sent = sent + self._unsaved_sent

    def start_saving(self, stopping: threading.Event) -> None:
        """Save what changed every `save_interval` seconds until `stopping` is set."""
        if self._files is None:
            return

        def save_until_stopped() -> None:
            while not stopping.wait(self._save_interval):
                self.save()

        self._saver = threading.Thread(target=save_until_stopped, name="sim-state", daemon=True)
        self._saver.start()

    def stop_saving(self) -> None:
        """After `stopping` is set: let the saving thread end, then write the rest."""
        if self._saver is not None:
            self._saver.join(timeout=10)
            self._saver = None
        self.save()
