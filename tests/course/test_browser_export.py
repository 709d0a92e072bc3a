"""Every notebook the course runs, exported to HTML and read offline in headless Chromium.

Each notebook nbval runs (tests/support/notebooks.py) is exported as `jupyter nbconvert --to html
--execute` would export it, from the copy nbval's run of it left (tests/support/executed_notebooks.py:
recorded as nbconvert records an execution; a notebook nbval did not run here is executed
first), and opened from its file with every request that is not a file blocked. In each cell
there must be as many drawn plots (`.js-plotly-plot .main-svg`) as the notebook made figures
there: one per plotly output, and for a widget one per figure it held (the widget cannot render
offline; its static picture stands in). An animation's Play button advances its frames with no
kernel, and its slider has one step per frame. Formulas are typeset where a local MathJax is
installed (jupyter-server-mathjax), else the page's own CDN MathJax is blocked and this is not
checked. A notebook of widgets, executed by `jupyter nbconvert --execute` itself, checks their
static pictures further. Screenshots and the page's console go to artifacts/browser/.

Skipped without /usr/bin/chromium, unless MINIPIPE_REQUIRE_BROWSER=1 (CI): then it fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from minipipe.viz.offline import mathjax_url
from tests.support.browser.chromium import launched, offline_page, require_browser
from tests.support.browser.pages import CODE_CELL, check_animation, check_plots, expected_plots, jupyter_env
from tests.support.notebooks import REPO, RUN, find, ids

ARTIFACTS = REPO / "artifacts" / "browser"
NOTEBOOKS = find(RUN)

pytestmark = pytest.mark.browser


TYPESET = "() => document.querySelectorAll('.MathJax_CHTML, .MathJax, mjx-container').length"
# Scripts of over 1 MB in the page, the widget state aside: plotly.js (~4.6 MB) once, not per figure.
BIG_SCRIPTS = """() => [...document.scripts].filter(s => s.text.length > 1e6
  && s.type !== 'application/vnd.jupyter.widget-state+json').length"""


def nbconvert(*args, env, workdir, timeout=120) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--output-dir", str(workdir), *args],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"jupyter nbconvert {' '.join(args)} failed:\n{done.stderr[-4000:]}"


def html_page(executed: Path, workdir: Path) -> Path:
    """The page `jupyter nbconvert --to html` makes of an executed notebook (its exporter, with
    no Jupyter settings of the user's), with a local MathJax where there is one, in `workdir`."""
    exporter = HTMLExporter(mathjax_url=mathjax_url()) if mathjax_url() else HTMLExporter()
    page, _ = exporter.from_filename(str(executed))
    path = workdir / f"{executed.stem}.html"
    path.write_text(page, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chromium():
    require_browser()
    with launched() as browser:
        yield browser


@pytest.mark.timeout(600)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_exported_page_draws_every_figure_offline(notebook, chromium, tmp_path, executed):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ran = executed(notebook)
    nb, page_file = nbformat.read(ran, as_version=4), html_page(ran, tmp_path)
    plots, animations = expected_plots(nb)
    has_math = any(c.cell_type == "markdown" and "$" in c.source for c in nb.cells)

    with offline_page(chromium, ARTIFACTS, f"export_{notebook.stem}", may_try_network=True) as page:
        page.goto(page_file.as_uri(), wait_until="load", timeout=120_000)
        check_plots(page, plots)
        assert page.evaluate(BIG_SCRIPTS) == (1 if sum(plots) else 0), "plotly.js is embedded once per page"
        for cell, frames in animations:
            check_animation(page, page.locator(CODE_CELL).nth(cell).locator(".js-plotly-plot").first, frames)
        check_questions(page, questions_in(nb))
        if has_math and mathjax_url():
            page.wait_for_function(f"() => ({TYPESET})() > 0", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / f"export_{notebook.stem}.png"), full_page=True)


# A notebook of widgets only: a ScheduleExplorer changed by a later cell, and a RunExplorer after a
# run (the fake runner of tests/support/widgets.py: no processes).
WIDGETS = [
    "from minipipe.viz import ScheduleExplorer\nexplorer = ScheduleExplorer(kind='1f1b', p=2, m=2)\nexplorer",
    "from tests.support.widgets import FakeRunner, run_explorer\n"
    "runs = run_explorer(FakeRunner(), kind='gpipe', p=2, m=4, steps=2)\nruns.run()\nruns",
    "explorer.controls['m'].value = 6",
]


@pytest.mark.timeout(300)
def test_widgets_show_their_current_figures_where_they_cannot_render(chromium, tmp_path):
    """The static pictures hold the figures as they are at the end of the run (m=6, not m=2),
    also when the notebook is saved without widget state (nbconvert then picks a widget's
    text/html), and step aside where a widget manager draws the live widget."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    notebook = tmp_path / "widgets.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in WIDGETS]), notebook)
    nbconvert(
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.timeout=600",
        "--output",
        notebook.stem,
        str(notebook),
        env=jupyter_env(tmp_path),
        workdir=tmp_path,
        timeout=600,
    )
    nb = nbformat.read(notebook, as_version=4)
    plots, _ = expected_plots(nb)
    assert plots == [1, 2, 0]
    del nb.metadata["widgets"]
    stateless = tmp_path / "stateless.ipynb"
    nbformat.write(nb, stateless)

    for name, page_path in (
        ("widgets", html_page(notebook, tmp_path)),
        ("widgets_stateless", html_page(stateless, tmp_path)),
    ):
        with offline_page(chromium, ARTIFACTS, f"export_{name}", may_try_network=True) as page:
            page.goto(page_path.as_uri(), wait_until="load", timeout=120_000)
            check_plots(page, plots)
            titles = page.locator(".minipipe-static-fallback .gtitle").all_text_contents()
            assert "m=6" in titles[0] and "gpipe" in titles[1], titles
            assert "measured on 2 processes" in page.locator(".minipipe-static-fallback").nth(1).text_content()
            page.screenshot(path=str(ARTIFACTS / f"export_{name}.png"), full_page=True)
            if name == "widgets":
                check_widget_pictures(page)


QUESTION = "minipipe-question-static"  # minipipe/course/question.py: a check-yourself question, no kernel


def questions_in(nb) -> int:
    """Check-yourself questions the executed notebook shows (each leaves its fold for exported pages)."""
    return sum(
        f'class="{QUESTION}"' in "".join(out.get("data", {}).get("text/html", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )


def check_questions(page, expected: int) -> None:
    """Every question reads offline: shown with its answer folded, which opens on a click."""
    questions = page.locator(f".{QUESTION}")
    assert questions.count() == expected, f"{questions.count()} check-yourself questions in the page, {expected} made"
    for i in range(expected):
        question = questions.nth(i)
        assert question.is_visible(), "a check-yourself question is hidden although no widget can render"
        answer = question.locator("details > div")
        assert not answer.is_visible()  # folded until the reader opens it
        question.locator("summary").click()
        assert answer.is_visible()


def check_widget_pictures(page) -> None:
    """Each widget's picture shows offline, and steps aside if a widget manager draws the live
    widget next to the view's script tag (what an online page would do)."""
    boxes = page.locator(".minipipe-static-fallback")
    assert boxes.count() > 0
    for i in range(boxes.count()):
        box = boxes.nth(i)
        assert box.is_visible(), "a widget's static picture is hidden although the widget cannot render"
        box.evaluate("""box => {
          const tags = [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')];
          const view = tags.find(t => box.closest('.jp-Cell').contains(t));
          const live = document.createElement('div');
          live.className = 'widget-subarea';
          live.innerHTML = '<div class="js-plotly-plot"></div>';
          view.parentElement.insertBefore(live, view);
        }""")
        page.wait_for_function("box => box.offsetParent === null", arg=box.element_handle(), timeout=5_000)
