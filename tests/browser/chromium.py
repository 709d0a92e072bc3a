"""Debian's Chromium under Playwright, for the real-browser tests (never `playwright install`)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"   # Debian's package; Playwright must never download its own
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_browser() -> None:
    """Skip without Chromium or Playwright; fail instead when MINIPIPE_REQUIRE_BROWSER=1 (CI)."""
    missing = [what for what, ok in (("/usr/bin/chromium (apt-get install -y chromium)", Path(CHROMIUM).exists()),
                                     ("playwright (pip install playwright)", has_playwright())) if not ok]
    if missing:
        message = "the browser test needs " + " and ".join(missing)
        if os.environ.get("MINIPIPE_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (MINIPIPE_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(message)


def has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True
