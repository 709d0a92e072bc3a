"""The demo lesson runs top to bottom in a kernel and shows what it promises (no browser: the
outputs are checked as data; tests/test_browser_demo.py looks at them in JupyterLab)."""
import json
from pathlib import Path

import nbformat
import pytest

from minipipe import make_schedule, simulate

DEMO = Path(__file__).resolve().parents[1] / "lessons" / "00_demo.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_demo_is_committed_clean():
    nb = nbformat.read(DEMO, as_version=4)
    nbformat.validate(nb)
    assert "widgets" not in nb.metadata
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.timeout(180)
def test_demo_runs_and_shows_timeline_animation_and_explorer(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(DEMO, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [cell.outputs for cell in nb.cells if cell.cell_type == "code"]
    assert not [o for out in outputs for o in out if o.output_type == "error"]
    figures = [o.data[PLOTLY] for out in outputs for o in out if PLOTLY in o.get("data", {})]
    figures = [json.loads(f) if isinstance(f, str) else f for f in figures]
    timeline, animation = figures[0], figures[1]
    n = len(simulate(make_schedule("1f1b", 4, 8)).events)
    assert sum(len(t["x"]) for t in timeline["data"]) == n
    assert len(animation["frames"]) == 40 and animation["layout"]["updatemenus"]
    assert any(WIDGET in o.get("data", {}) for o in outputs[-1])            # the ScheduleExplorer
    assert "bubble 27.3%" in "".join(o.get("text", "") for o in outputs[0])
