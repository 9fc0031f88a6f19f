"""The simulator's state on disk, so a restarted simulator is an outage, not a new platform.

Two files in the simulator's data dir:

- `simulator.json`: numbers (with their tokens, caps and blocks), unused codes, templates,
  subscriptions. Small, and rewritten whole on a change: written to a temporary file, flushed to disk, then renamed
  over the old one, so a crash leaves the old state or the new one, never half of either.
- `simulator-sent.jsonl`: the accepted sends, one JSON object a line, appended in batches. A
  send costs no rewrite of everything sent before it; a line torn by a crash is skipped on
  load. Clearing, or growing past twice the kept number of sends, rewrites it the same safe way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STATE_FILE = "simulator.json"
SENT_FILE = "simulator-sent.jsonl"


class StateFiles:
    def __init__(self, data_dir: str | Path):
        self.dir = Path(data_dir)
        self.state_path = self.dir / STATE_FILE
        self.sent_path = self.dir / SENT_FILE
        self.sent_lines = 0  # lines in the sent file: past twice the limit it is compacted

    def load_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def load_sent(self) -> list[dict[str, Any]]:
        records = []
        try:
            with self.sent_path.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        continue  # the end of a write a crash cut short
        except FileNotFoundError:
            pass
        self.sent_lines = len(records)
        return records

    def save_state(self, state: dict[str, Any]) -> None:
        self._replace(self.state_path, json.dumps(state, separators=(",", ":")))

    def append_sent(self, records: list[dict[str, Any]]) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _open_private(self.sent_path, append=True) as out:
            out.write(_lines(records))
            out.flush()
            os.fsync(out.fileno())
        self.sent_lines += len(records)

    def rewrite_sent(self, records: Iterable[dict[str, Any]]) -> None:
        records = list(records)
        self._replace(self.sent_path, _lines(records))
        self.sent_lines = len(records)

    def _replace(self, path: Path, text: str) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        with _open_private(temporary, append=False) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power cut
        finally:
            os.close(directory)


def _lines(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records)


def _open_private(path: Path, append: bool):
    """The state holds the numbers' tokens: its files are readable by the simulator's user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through os.open: close it up too
    return os.fdopen(fd, "w", encoding="utf-8")
