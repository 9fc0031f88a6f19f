"""A real browser for page tests: the system Chromium driven by Playwright.

`from tests.browser_fixtures import *` brings the `browser` fixture. `scripts/install-test-deps`
installs the browser; outside CI a missing browser skips, in CI (`CI=true`) it fails. `shoot`
photographs a page for the docs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.live import ROOT

__all__ = ["browser"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IN_CI = os.environ.get("CI", "").lower() == "true"
# Pages are photographed on every run; into docs/portal only when asked
# (SVC_PORTAL_SCREENSHOTS=docs/portal), so a test run leaves the work tree as it found it.
_ASKED = os.environ.get("SVC_PORTAL_SCREENSHOTS")
SHOTS = ROOT / _ASKED if _ASKED else Path(tempfile.mkdtemp(prefix="portal-shots-"))


def shoot(page, name: str, full_page: bool = True) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture
def browser():
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (scripts/install-test-deps installs it)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed (pip install -e '.[test]')"
    if problem:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
