"""Debian's Chromium under Playwright, for the real-browser tests (never `playwright install`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright must never download its own
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_browser() -> None:
    """Skip without Chromium or Playwright; fail instead when MINIPIPE_REQUIRE_BROWSER=1 (CI)."""
    missing = [
        what
        for what, ok in (
            ("/usr/bin/chromium (apt-get install -y chromium)", Path(CHROMIUM).exists()),
            ("playwright (pip install playwright)", has_playwright()),
        )
        if not ok
    ]
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


@contextlib.contextmanager
def launched():
    """Chromium, headless, for a module's tests (call require_browser() first)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@contextlib.contextmanager
def offline_page(browser, artifacts: Path, name: str, *, may_try_network: bool = False):
    """A page that may load files only. What it tried to fetch and what it said go to
    artifacts/NAME_console.log, a screenshot to NAME_failure.png when the test fails in it.
    Unless `may_try_network` (a page that links a CDN it can do without), trying is a failure."""
    blocked, console = [], []
    context = browser.new_context(viewport=dict(width=1300, height=1000))
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("file:")
            else (blocked.append(route.request.url), route.abort())
        ),
    )
    page = context.new_page()
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    page.on("pageerror", lambda err: console.append(f"pageerror: {err}"))
    try:
        yield page
        assert may_try_network or not blocked, f"the page asked the network for: {blocked}"
    except BaseException:
        page.screenshot(path=str(artifacts / f"{name}_failure.png"), full_page=True)
        raise
    finally:
        (artifacts / f"{name}_console.log").write_text("\n".join(console + [f"blocked: {u}" for u in blocked]))
        context.close()
