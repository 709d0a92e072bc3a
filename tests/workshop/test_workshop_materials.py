"""The teacher's materials from one lesson, in a real browser with every request off this machine
blocked: slides cut at the lesson's headings whose figures and formulas draw offline, and notes and a
plan that carry the times this build measured."""

import contextlib
import http.server
import re
import threading
from functools import partial
from pathlib import Path

import nbformat
import pytest

from minipipe.workshop.materials import LESSONS, build, cut_into_slides
from tests.support.browser.chromium import launched, require_browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "workshop"
LESSON = "01_why_split"  # figures and formulas, no processes: the quickest lesson to run


def test_slides_are_cut_at_headings_in_a_copy():
    nb = nbformat.read(LESSONS / f"{LESSON}.ipynb", as_version=4)
    before = nbformat.writes(nb)
    cut = cut_into_slides(nb)
    assert nbformat.writes(nb) == before  # the lesson itself is untouched
    kinds = [c.metadata["slideshow"]["slide_type"] for c in cut.cells]
    headings = [
        line
        for c in nb.cells
        if c.cell_type == "markdown"
        for line in c.source.splitlines()
        if re.match(r"#{1,2} ", line)
    ]
    assert kinds.count("slide") == len(headings) and kinds[0] == "slide"
    assert [c.source for c in cut.cells if c.cell_type == "code"] == [
        c.source for c in nb.cells if c.cell_type == "code"
    ]


@contextlib.contextmanager
def served(folder: Path):
    """The folder over http on loopback, as the README tells a teacher to open the slides."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
@pytest.mark.timeout(600)
def test_a_lessons_slides_notes_and_plan_work_offline(tmp_path):
    require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    times = build(tmp_path, only=[LESSON], progress=None)
    assert set(times) == {LESSON} and times[LESSON] > 0
    notes = (tmp_path / "notes.html").read_text()
    assert re.search(rf"<code>{LESSON}</code></td>\s*<td>{times[LESSON]:.0f} s</td>", notes), (
        "the notes' table has this build's time"
    )
    measured = notes.split("Measured by this build")[1][:400]
    assert ("Not measured on a GPU: this machine has none" in measured) == ("no GPU" in measured)
    assert "exercise" in (tmp_path / "plan.html").read_text()
    executed = nbformat.read(tmp_path / "executed" / f"{LESSON}.ipynb", as_version=4)
    headings = sum(
        1
        for c in executed.cells
        if c.cell_type == "markdown"
        for line in c.source.splitlines()
        if re.match(r"#{1,2} ", line)
    )

    with served(tmp_path) as base, launched() as browser:
        context = browser.new_context(viewport=dict(width=1280, height=800))
        local = base + "/"
        asked = []
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(local)
                else (asked.append(route.request.url), route.abort())
            ),
        )
        page = context.new_page()
        page.goto(f"{base}/index.html")
        page.click(f"text={LESSON}")
        page.wait_for_function("() => document.querySelector('.reveal.ready') !== null", timeout=60_000)
        assert page.evaluate("() => document.querySelectorAll('.reveal .slides > section').length") == headings
        plots = formulas = 0
        for _ in range(headings):  # every slide in turn, as a teacher would show it
            page.wait_for_timeout(300)
            plots += page.evaluate(
                "() => document.querySelectorAll('section.present .js-plotly-plot .main-svg').length"
            )
            formulas += page.evaluate("() => document.querySelectorAll('section.present .MathJax').length")
            page.keyboard.press("ArrowRight")
        page.screenshot(path=str(ARTIFACTS / "slides_last.png"))
        text = page.evaluate("() => document.body.innerText")
        assert plots > 0 and formulas > 0, (plots, formulas)
        assert "Math Processing Error" not in text
        assert not asked, f"the slides asked the network for: {asked}"
