"""The demo lesson in a real browser: JupyterLab + headless Chromium (Debian's, via Playwright).

Runs tests/support/browser/demo.ipynb (a timeline, an animation, memory, the explorer: what lessons show) cell by
cell in JupyterLab and checks what a learner would see:
the timeline is drawn with one bar per action, pressing Play advances the animation to the full
timeline, moving ScheduleExplorer's m slider redraws (and an invalid m shows the engine's
message), and a check-yourself question says a wrong answer is too low without giving the answer, then shows
it on request. Each figure is drawn once: by plotly's JupyterLab renderer, not also from the HTML
the figures carry for exported pages, and the explorer's static picture stays hidden beside
the live widget. Screenshots (light and dark theme) and the JupyterLab / browser logs go to
artifacts/browser/.

Skipped when /usr/bin/chromium is missing, unless MINIPIPE_REQUIRE_BROWSER=1 (CI), then it fails.
"""

import shutil

import pytest

from minipipe import make_schedule, simulate
from tests.support.browser.chromium import launched, require_browser
from tests.support.browser.jupyterlab import (
    ALL_EXECUTED,
    DIRTY_ONCE_KERNEL_KNOWN,
    DRAWN_BARS,
    ERRORS,
    KERNEL_IDLE,
    NOTEBOOK_OPEN,
    REPO,
    RUN_ALL,
    SET_THEME,
    jupyterlab,
)

DEMO = REPO / "tests" / "support" / "browser" / "demo.ipynb"
ARTIFACTS = REPO / "artifacts" / "browser"
# code cells of the demo, in order (the test and the notebook are kept in step)
TIMELINE, ANIMATION, EXPLORER, QUESTION = 1, 2, 5, 6
PLOTS = [0, 1, 1, 1, 1, 1, 0]  # figures per code cell
EXPLANATION = "every forward runs before any backward"  # the question's, in demo.ipynb
VISIBLE_PLOTS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(cell =>
  [...cell.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent !== null).length)"""

pytestmark = pytest.mark.browser


def n_actions(kind, p, m, v=1) -> int:
    return len(simulate(make_schedule(kind, p, m, v)).events)


@pytest.mark.timeout(300)
def test_demo_lesson_renders_plays_and_redraws(tmp_path):
    require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(DEMO, root / DEMO.name)  # JupyterLab autosaves outputs into the copy only
    console: list[str] = []
    with jupyterlab(root, tmp_path / "lab", ARTIFACTS / "jupyterlab.log") as lab, launched() as browser:
        page = browser.new_page(viewport=dict(width=1400, height=1000))
        page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
        try:
            drive(page, lab)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "failure.png"))
            raise
        finally:
            (ARTIFACTS / "browser_console.log").write_text("\n".join(console))
    assert lab.process.poll() is not None, "JupyterLab is still running after the test"


def drive(page, lab):
    page.goto(lab.url(f"lab/tree/{DEMO.name}"))
    page.wait_for_function(NOTEBOOK_OPEN, timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    assert page.evaluate(DIRTY_ONCE_KERNEL_KNOWN) is False, "the demo counts as edited before anything ran"
    page.evaluate(RUN_ALL)
    page.wait_for_function(ALL_EXECUTED, timeout=120_000, polling=500)
    assert page.evaluate(ERRORS) == []
    cells = page.locator(".jp-Notebook .jp-CodeCell")

    # 1. the timeline: a plotly plot with one bar per action of 1F1B, p=4, m=8
    timeline = cells.nth(TIMELINE).locator(".js-plotly-plot").first
    timeline.locator(".main-svg").first.wait_for(timeout=30_000)
    expected = n_actions("1f1b", 4, 8)
    wait_for_count(page, timeline, ".barlayer g.point", expected)
    assert "bubble 27.3% (textbook 27.3%)" in timeline.locator(".gtitle").text_content()
    timeline.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "demo_timeline_light.png"))

    # 2. the animation: nothing drawn at t = 0; Play draws more, and ends at the full timeline
    animation = cells.nth(ANIMATION).locator(".js-plotly-plot").first
    animation.locator(".main-svg").first.wait_for(timeout=30_000)
    assert drawn_bars(animation) == 0
    slider_label = animation.locator(".slider-container text.slider-label").first
    assert slider_label.text_content() == "t = 0 ms"
    animation.locator("g.updatemenu-button", has_text="Play").click()
    page.wait_for_function(f"el => ({DRAWN_BARS})(el) > 0", arg=animation.element_handle(), timeout=15_000)
    assert slider_label.text_content() != "t = 0 ms"
    page.wait_for_function(f"el => ({DRAWN_BARS})(el) === {expected}", arg=animation.element_handle(), timeout=30_000)

    # 3. the explorer: moving the m slider re-simulates and redraws
    explorer = cells.nth(EXPLORER).locator(".minipipe-explorer")
    plot = explorer.locator(".js-plotly-plot").first
    plot.locator(".main-svg").first.wait_for(timeout=30_000)
    wait_for_count(page, plot, ".barlayer g.point", expected)
    assert page.evaluate(VISIBLE_PLOTS) == PLOTS  # each figure once
    # plotly's JupyterLab renderer draws them (jp-RenderedPlotly), not the HTML they carry for exports
    assert page.locator(".jp-OutputArea-output.jp-RenderedPlotly").count() == sum(PLOTS[:EXPLORER])
    picture = cells.nth(EXPLORER).locator(".minipipe-static-fallback")
    assert picture.count() == 1 and not picture.is_visible()
    assert picture.locator(".js-plotly-plot").count() == 0  # kept inert: never drawn here
    m_slider = explorer.locator(".minipipe-m")
    m_slider.locator(".noUi-handle").focus()
    for _ in range(4):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "el => el.textContent.trim() === '12'", arg=m_slider.locator(".widget-readout").element_handle(), timeout=10_000
    )
    wait_for_count(page, plot, ".barlayer g.point", n_actions("1f1b", 4, 12))
    assert "m=12" in plot.locator(".gtitle").text_content()

    # ... interleaved doubles the actions (two chunks per rank); m=13 is not a multiple of p=4:
    # the widget shows the engine's message instead of a traceback
    explorer.locator(".minipipe-kind select").select_option("interleaved")
    wait_for_count(page, plot, ".barlayer g.point", n_actions("interleaved", 4, 12, 2))
    m_slider.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    explorer.get_by_text("is not a multiple of p=4").wait_for(timeout=10_000)
    explorer.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "demo_explorer_light.png"))

    # 4. check yourself: nothing of the answer shows until the learner has committed one
    cell = cells.nth(QUESTION)
    question = cell.locator(".minipipe-question")
    question.scroll_into_view_if_needed()
    # the cell's code is collapsed (it computes the explanation), and so is the exported page's fold
    assert question.is_visible() and cell.locator(".jp-InputPlaceholder").is_visible()
    assert EXPLANATION not in cell.inner_text()
    folded = cell.locator(".minipipe-static-fallback")
    assert folded.count() == 1 and not folded.is_visible()  # the exported page's fold stays hidden here
    typed, check = question.locator("input[type=text]"), question.get_by_role("button", name="Check")
    check.click()
    question.get_by_text("Type a number first").wait_for(timeout=10_000)
    assert EXPLANATION not in cell.inner_text()
    # a wrong answer: which way it is wrong, and another try, not the answer
    show = question.get_by_role("button", name="Show the answer")
    assert not show.is_visible()
    typed.fill("4")
    check.click()
    question.get_by_text("Not right: too low.").wait_for(timeout=10_000)
    assert EXPLANATION not in cell.inner_text() and show.is_visible()
    page.screenshot(path=str(ARTIFACTS / "demo_question_light.png"))
    show.click()  # ... and the answer on request
    question.get_by_text("The answer: 8.").wait_for(timeout=10_000)
    assert EXPLANATION in cell.inner_text() and not show.is_visible()
    typed.fill("8")
    check.click()
    question.get_by_text("✓ Right.").wait_for(timeout=10_000)

    # the same page in the dark theme, for the record (and for eyes checking contrast)
    page.evaluate(SET_THEME, "JupyterLab Dark")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=15_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "demo_explorer_dark.png"))
    timeline.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "demo_timeline_dark.png"))


def drawn_bars(plot) -> int:
    return plot.evaluate(DRAWN_BARS)


def wait_for_count(page, root, selector: str, count: int, timeout: float = 30_000) -> None:
    """Wait until `root` holds exactly `count` elements matching `selector`; fail with the last count."""
    script = f"([el, sel]) => el.querySelectorAll(sel).length === {count}"
    try:
        page.wait_for_function(script, arg=[root.element_handle(), selector], timeout=timeout)
    except Exception as e:
        got = root.evaluate("(el, sel) => el.querySelectorAll(sel).length", selector)
        raise AssertionError(f"expected {count} elements {selector!r}, found {got}") from e
