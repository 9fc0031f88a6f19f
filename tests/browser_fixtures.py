"""A real browser for page tests: the system Chromium driven by Playwright.

`from tests.browser_fixtures import *` brings the `browser` fixture. `scripts/install-test-deps`
installs the browser; outside CI a missing browser skips, in CI (`CI=true`) it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["browser"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IN_CI = os.environ.get("CI", "").lower() == "true"


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
