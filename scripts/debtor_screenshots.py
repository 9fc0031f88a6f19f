"""Photograph the debtor's page on a phone (360 px wide) in Spanish and Portuguese (Brazil).

Starts `svcctl up --sim` on a fresh data dir (the demo, whose collection loop leaves a debt
partly paid with a promise), opens the debtor's page it prints in the system Chromium through
Playwright, once per company locale, saves docs/receivables/debtor-page-<locale>.png, and prints
`svcctl cartera report` of the demo company (docs/receivables.md, "The report on the demo").

Run: scripts/debtor-screenshots [OUT_DIR]
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
LOCALES = {"es_CO": "es", "pt_BR": "pt-BR"}
PHONE = {"width": 360, "height": 780}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def svcctl(env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        sys.exit(f"svcctl {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def main() -> None:
    from playwright.sync_api import sync_playwright

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "receivables"
    out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="debtor-shots-"))
    env = {**os.environ, "SVC_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    log_path = data / "up.log"
    ports = [free_port() for _ in range(3)]
    with open(log_path, "ab") as log:
        up = subprocess.Popen([sys.executable, "-m", "svcctl.main", "up", "--sim", "--bind", f"127.0.0.1:{ports[0]}",
                               "--sim-bind", f"127.0.0.1:{ports[1]}", "--payments-sim-bind", f"127.0.0.1:{ports[2]}"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"debtor\s+(http://\S+/d/dl_[\w-]+)", log_path.read_text())):
            if time.monotonic() > deadline or up.poll() is not None:
                sys.exit(f"the demo printed no debtor page:\n{log_path.read_text()}")
            time.sleep(0.3)
        page_url = found.group(1)
        tenant = re.search(r"tenant\s+(ten_\w+)", log_path.read_text()).group(1)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
            for locale, tag in LOCALES.items():
                svcctl(env, "tenants", "set", tenant, "--locale", locale)
                page = browser.new_page(viewport=PHONE, device_scale_factor=1, locale=tag)
                page.goto(page_url)
                page.click("details:has(form.promise) summary")  # the promise form, opened
                path = out / f"debtor-page-{tag}.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)
                page.close()
            browser.close()
        svcctl(env, "tenants", "set", tenant, "--locale", "en_US")
        print(svcctl(env, "cartera", "report", "--tenant", tenant))
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=40)


if __name__ == "__main__":
    main()
