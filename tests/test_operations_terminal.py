"""`svcctl status` and `svcctl up` as a person sees them: each runs in a pseudo-terminal 80 columns
wide, against a live service. Our styling reaches the terminal as styling (escape codes), never as
markup written out as text, and `up`'s banner is not buried under the queue's routine lines."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time

import pytest
import requests

from tests.live import ROOT, LiveService, free_port, wait_until
from tests.live_fixtures import *  # noqa: F403  (live_service)

pytestmark = pytest.mark.slow

COLUMNS = 80
# The styles ours are written with: green (a label, a live process), dim (a stopped one).
GREEN, DIM = "\x1b[32m", "\x1b[2m"
# Rich markup written out as text: [green], [/], [bold red]...
MARKUP = re.compile(r"\[/?[a-z][a-z ]*\]|\[/\]")
# Select Graphic Rendition and the cursor movements of a live view: what a terminal acts on.
ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A line of `up`'s banner: a label, or the label column left blank for a second line.
BANNER_LINE = re.compile(r"^(?:(?:API|sim|payments|tenant|number|key|try|portal|sign in) +| {9})\S.*$",
                         re.MULTILINE)
# huey's lines about each task it schedules and runs, and the task list it prints at start.
ROUTINE = re.compile(r"Enqueueing periodic task|Executing jobs\.|executed in \d|^\+ jobs\.", re.MULTILINE)


class Terminal:
    """A command in a pseudo-terminal of COLUMNS columns: it sees a terminal on stdout and stderr."""

    def __init__(self, args: list[str], env: dict[str, str]):
        controller, terminal = os.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
        self.process = subprocess.Popen([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT,
                                        env={**env, "COLUMNS": str(COLUMNS), "LINES": "40", "TERM": "xterm-256color",
                                             "PYTHONUNBUFFERED": "1"},
                                        stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True)
        os.close(terminal)
        self.controller = controller
        self.raw = ""

    def read(self, seconds: float = 0.0) -> str:
        """What the command wrote, once nothing more arrives within `seconds`."""
        while select.select([self.controller], [], [], seconds)[0]:
            try:
                chunk = os.read(self.controller, 65536)
            except OSError:  # the command ended and closed its side
                break
            if not chunk:
                break
            self.raw += chunk.decode(errors="replace")
        return self.raw

    def wait_for(self, pattern: str, timeout: float) -> str:
        wait_until(lambda: re.search(pattern, self.read(0.2), re.MULTILINE), timeout=timeout, interval=0,
                   message=f"{pattern!r} on the terminal")
        return self.raw

    def finish(self, sig: int | None = None, timeout: float = 60) -> str:
        if sig is not None:
            os.killpg(self.process.pid, sig)
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self.read(0.2)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.read(0.2)
        os.close(self.controller)
        return self.raw

    @property
    def text(self) -> str:
        """What a reader sees, the styling taken out."""
        return ESCAPE_CODE.sub("", self.raw).replace("\r", "")


def status_json(env: dict[str, str]) -> dict:
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "status", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def section(text: str, title: str, next_title: str) -> str:
    return text[text.index(title):text.index(next_title)]


@pytest.fixture
def service_with_a_stopped_consumer(live_service: LiveService):
    """The live service, and a second consumer that ran and stopped cleanly."""
    second = live_service.start_worker("worker2", periodic=False)
    name = f"{socket.gethostname()}:{second.pid}"

    def state() -> str | None:
        return next((item["state"] for item in status_json(live_service.env)["processes"]
                     if item["name"] == name), None)

    wait_until(lambda: state() == "alive", timeout=60, interval=0.5, message="the second consumer's heartbeat")
    live_service.kill("worker2", signal.SIGTERM)
    wait_until(lambda: state() == "stopped", timeout=30, interval=0.5, message="the second consumer's clean stop")
    yield live_service, name


def test_status_styles_what_is_ours_and_lists_stopped_processes_apart(service_with_a_stopped_consumer):
    service, stopped_name = service_with_a_stopped_consumer
    running = [item["name"] for item in status_json(service.env)["processes"] if item["state"] == "alive"]
    assert running and stopped_name not in running

    once = Terminal(["status", "--once"], service.env)
    once.finish(timeout=60)
    assert once.process.returncode == 0, once.text
    # Ours is styled: the live processes' state in green, the stopped one's time in dim.
    assert f"{GREEN}alive" in once.raw and re.search(rf"{re.escape(DIM)}[0-9.]+[smh] ago", once.raw)
    assert not MARKUP.search(once.text), once.text
    assert max(len(line) for line in once.text.splitlines()) <= COLUMNS
    processes = section(once.text, "processes", "stopped in the last")
    stopped = section(once.text, "stopped in the last", "queue")
    assert all(name in processes for name in running)
    assert stopped_name not in processes and "stopped" not in processes
    assert stopped_name in stopped and "ago" in stopped

    # The live view, refreshed in place until Ctrl-C, shows the same.
    live = Terminal(["status", "--interval", "0.5"], service.env)
    live.wait_for("credits reserved by company", timeout=60)
    live.finish(signal.SIGINT, timeout=30)
    assert f"{GREEN}alive" in live.raw and stopped_name in live.text
    assert not MARKUP.search(live.text), live.text


def tasks_run(metrics_url: str, task: str) -> float:
    """How many times the consumer has finished `task`, from its metrics port (0 before it answers)."""
    try:
        body = requests.get(metrics_url, timeout=2).text
    except requests.RequestException:
        return 0
    pattern = re.compile(rf'^svc_tasks_total\{{[^}}]*task="{re.escape(task)}"[^}}]*\}} ([0-9.e+]+)$', re.MULTILINE)
    return sum(float(value) for value in pattern.findall(body))


def test_up_banner_reads_in_80_columns_and_stays_above_routine_lines(tmp_path):
    api, sim, gateway, metrics = (free_port() for _ in range(4))
    # A fresh installation on its own data dir, every setting at its default but the metrics port:
    # the consumer's counters say when a periodic task has run.
    env = {name: value for name, value in os.environ.items() if not name.startswith("SVC_")}
    env.update({"SVC_DATA_DIR": str(tmp_path / "data"), "SVC_METRICS_PORT": str(metrics)})
    up = Terminal(["up", "--sim", "--bind", f"127.0.0.1:{api}", "--sim-bind", f"127.0.0.1:{sim}",
                   "--payments-sim-bind", f"127.0.0.1:{gateway}"], env)
    try:
        up.wait_for(r"^.*sign in.*\n", timeout=120)
        # jobs.webhooks.sweep runs every minute: a run finished after the banner was printed.
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        before = tasks_run(metrics_url, "jobs.webhooks.sweep")
        wait_until(lambda: tasks_run(metrics_url, "jobs.webhooks.sweep") > before, timeout=120, interval=1,
                   message="a periodic task's run after the banner")
        up.read(0.2)  # its lines, if any, were written before it counted as finished
    finally:
        up.finish(signal.SIGINT, timeout=60)
    text = up.text

    # The banner's lines by their labels (the other processes' first lines may come in between).
    banner = BANNER_LINE.findall(text)
    labels = [line.split()[0] for line in banner]
    assert labels == ["API", "sim", "payments", "tenant", "number", "key", "try", "portal", "sign"], banner
    key = banner[labels.index("key")].split()[1]
    assert key.startswith("svc_live_") and f"{GREEN}key" in up.raw
    # Every line fits but the ones holding the key (longer than 80 characters by itself), which are
    # never broken by us: the terminal wraps them, and they paste whole.
    assert all(len(line) <= COLUMNS for line in banner if key not in line), banner
    assert not MARKUP.search(text), text

    after_banner = text[text.index(banner[-1]) + len(banner[-1]):]
    assert not ROUTINE.search(after_banner), after_banner

    # Started again: the key and the password are not shown twice; the commands that make new
    # ones are, whole, in 80 columns.
    again = Terminal(["up", "--sim", "--bind", f"127.0.0.1:{api}", "--sim-bind", f"127.0.0.1:{sim}",
                      "--payments-sim-bind", f"127.0.0.1:{gateway}"], env)
    try:
        again.wait_for(r"reset-password .*\n", timeout=120)
    finally:
        again.finish(signal.SIGINT, timeout=60)
    banner = BANNER_LINE.findall(again.text)
    assert key not in again.text and all(len(line) <= COLUMNS for line in banner), banner
    assert " " * 9 + "svcctl keys create --tenant ten_" in again.text
    assert " " * 9 + "svcctl portal reset-password --email owner@demo.example.com\n" in again.text
    assert not MARKUP.search(again.text), again.text
