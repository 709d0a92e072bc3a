"""What the course's pages should show, read from a notebook and from the page in Chromium: the plots
each code cell made (plotly outputs, and the figures inside a widget), how many the page draws, an
animation that plays with no kernel. tests/course/test_browser_export.py and tests/site/test_site.py read them."""

from __future__ import annotations

import json
import os

from tests.support.notebooks import REPO

PLOTLY = "application/vnd.plotly.v1+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# Plots drawn and visible, per code cell: nbconvert's lab template makes a .jp-CodeCell of each.
CODE_CELL = ".jp-CodeCell"


def plots_per_cell(cells: str) -> str:
    return f"""() => [...document.querySelectorAll('{cells}')].map(cell =>
  [...cell.querySelectorAll('.js-plotly-plot')]
    .filter(p => p.querySelector('.main-svg') && p.offsetParent !== null).length)"""


# Total drawn width of a plot's bars: an animation frame draws actions up to its time.
BAR_WIDTH = """plot => [...plot.querySelectorAll('.barlayer g.point path')]
  .reduce((sum, p) => sum + p.getBBox().width, 0)"""


def figure_widgets(state: dict, model_id: str) -> int:
    """The plotly FigureWidgets inside a widget: its models' references, followed down."""
    seen, todo, count = set(), [model_id], 0
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in state:
            continue
        seen.add(mid)
        model = state[mid]["state"]
        count += str(model.get("_anywidget_id", "")).endswith("FigureWidget")
        todo += [ref[len("IPY_MODEL_") :] for ref in json.dumps(model).split('"') if ref.startswith("IPY_MODEL_")]
    return count


def expected_plots(nb) -> tuple[list[int], list[tuple[int, int]]]:
    """Plots per code cell, and (cell, frames) for each animation."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    plots, animations = [], []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        n = 0
        for out in cell.outputs:
            data = out.get("data", {})
            if PLOTLY in data:
                figure = data[PLOTLY] if isinstance(data[PLOTLY], dict) else json.loads(data[PLOTLY])
                if figure.get("frames"):
                    animations.append((len(plots), len(figure["frames"])))
                n += 1
            elif WIDGET_VIEW in data:
                n += figure_widgets(state, data[WIDGET_VIEW]["model_id"])
        plots.append(n)
    return plots, animations


def jupyter_env(tmp_path, *paths) -> dict:
    """No Jupyter or IPython settings of the user's; the checkout (and `paths`) importable."""
    return dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), *map(str, paths), os.environ.get("PYTHONPATH")])),
    )


def check_plots(page, expected: list[int], cells: str = CODE_CELL) -> None:
    """As many drawn plots in each code cell (`cells`: their CSS selector) as the notebook made."""
    per_cell = plots_per_cell(cells)
    script = f"expected => JSON.stringify(({per_cell})()) === JSON.stringify(expected)"
    try:
        page.wait_for_function(script, arg=expected, timeout=60_000, polling=500)
    except Exception as e:
        got = page.evaluate(per_cell)
        raise AssertionError(f"drawn plots per code cell: expected {expected}, found {got}") from e


def check_animation(page, plot, frames: int) -> None:
    """Play advances the frames of `plot` (a locator) in the page alone: the bars' drawn width and
    the slider move."""
    plot.scroll_into_view_if_needed()
    assert plot.locator(".slider-container rect.slider-tick-rect").count() == frames  # one step per frame
    label = plot.locator(".slider-container text.slider-label").first
    before_width, before_label = plot.evaluate(BAR_WIDTH), label.text_content()
    plot.locator("g.updatemenu-button", has_text="Play").click()
    page.wait_for_function(
        f"([el, w]) => Math.abs(({BAR_WIDTH})(el) - w) > 1", arg=[plot.element_handle(), before_width], timeout=15_000
    )
    page.wait_for_function(
        "([el, text]) => el.textContent !== text", arg=[label.element_handle(), before_label], timeout=15_000
    )
