"""What makes figures and widgets readable in an exported page (minipipe/viz/offline.py), in Python:
the renderer choice, and the static picture a widget leaves beside itself in a kernel. The page
itself is looked at in Chromium by tests/course/test_browser_export.py."""

import plotly.io as pio
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from minipipe.viz import offline
from minipipe.viz.offline import WIDGET_VIEW
from tests.support.widgets import FakeRunner, run_explorer


@pytest.mark.parametrize(
    "before, env, after",
    [
        ("plotly_mimetype", None, "plotly_mimetype+notebook"),  # plotly's choice in a Jupyter kernel
        ("plotly_mimetype", "plotly_mimetype", "plotly_mimetype"),  # the user's, through PLOTLY_RENDERER
        ("vscode", None, "vscode"),  # plotly's choice for VS Code & co
        ("browser", None, "browser"),  # a script
    ],
)
def test_embed_plotly_only_changes_plotlys_plain_jupyter_default(before, env, after, monkeypatch):
    monkeypatch.setattr(pio.renderers, "default", before)
    if env:
        monkeypatch.setenv("PLOTLY_RENDERER", env)
    else:
        monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
    offline.embed_plotly()
    assert pio.renderers.default == after


def pictures(html: str) -> int:
    return html.count('class="plotly-graph-div"')


def test_a_displayed_explorer_leaves_one_hidden_picture_of_its_figure(kernel):
    from minipipe.viz import ScheduleExplorer

    ex = ScheduleExplorer(kind="1f1b", p=4, m=8)
    with capture_output() as shown:
        ex._ipython_display_()
    widget, picture = (out.data for out in shown.outputs)
    assert widget[WIDGET_VIEW]["model_id"] == ex.model_id
    # what nbconvert picks when the notebook holds no widget state: a mark the picture looks for
    assert f'data-model-id="{ex.model_id}"' in widget["text/html"]
    html = picture["text/html"]
    assert 'class="minipipe-static-fallback"' in html and 'style="display:none"' in html
    assert pictures(html) == 1 and "m=8" in html
    # inert until the page's script decides: the figure sits in a <template>
    assert html.index("<template>") < html.index("plotly-graph-div") < html.index("</template>")
    assert ex.model_id in html.split("</template>")[1]


def test_the_picture_follows_the_figure_after_a_cell_runs_not_on_every_change(kernel):
    from minipipe.viz import ScheduleExplorer

    ex = ScheduleExplorer(kind="1f1b", p=4, m=8)
    with capture_output():
        ex._ipython_display_()
    with capture_output() as moved:
        ex.controls["m"].value = 12
        ex.controls["m"].value = 16
    assert moved.outputs == []  # slider moves redraw the widget only
    with capture_output() as after_cell:
        kernel.events.trigger("post_run_cell", None)
    (update,) = after_cell.outputs
    assert "m=16" in update.data["text/html"] and pictures(update.data["text/html"]) == 1
    with capture_output() as unchanged:
        kernel.events.trigger("post_run_cell", None)
    assert unchanged.outputs == []
    ex.controls["kind"].value = "interleaved"
    with capture_output():
        kernel.events.trigger("post_run_cell", None)
    ex.controls["m"].value = 13  # not a multiple of p: the figure stays as it was
    assert ex.error is not None
    with capture_output() as invalid:
        kernel.events.trigger("post_run_cell", None)
    assert invalid.outputs == []


def test_outside_a_kernel_only_the_widget_is_shown(monkeypatch):
    from minipipe.viz import ScheduleExplorer

    monkeypatch.setattr(offline, "in_kernel", lambda: False)
    InteractiveShell.instance()
    with capture_output() as shown:
        ScheduleExplorer()._ipython_display_()
    assert len(shown.outputs) == 1 and WIDGET_VIEW in shown.outputs[0].data


def test_run_explorer_pictures_its_run_too(kernel):
    ex = run_explorer(FakeRunner(), kind="1f1b", p=2, m=4, steps=2)
    with capture_output() as shown:
        ex._ipython_display_()
    assert pictures(shown.outputs[1].data["text/html"]) == 1
    ex.run()
    with capture_output() as after_run:
        kernel.events.trigger("post_run_cell", None)
    html = after_run.outputs[0].data["text/html"]
    assert pictures(html) == 2 and "measured on 2 processes" in html


def test_mathjax_url_is_a_local_file_or_none():
    url = offline.mathjax_url()
    assert url is None or (url.startswith("file://") and "MathJax.js?config=" in url)
