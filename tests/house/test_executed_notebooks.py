"""nbval's run of a notebook leaves the copy `jupyter nbconvert --execute` would have written, and a
test that reads it gets a copy from this run (tests/support/executed_notebooks.py).

A pytest run of its own, in a folder of its own, runs nbval with the plugin on small notebooks,
and tests there that read the copies: one nbval ran, one nbval did not run (the reader executes
it), one whose second cell fails under nbval, one that fails when the reader executes it. The
copy nbval's run left is compared with nbclient's own execution of the same notebook (site/build.py's
execute(), which runs it as nbconvert does): outputs, a display updated by a later cell, a cleared
output, a widget's state, an Output widget's capture and a plotly figure's HTML rendering.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from tests.support.executed_notebooks import site_builder
from tests.support.notebooks import REPO

SHOWN = [
    'print("printed")\nfrom IPython.display import HTML, display\n'
    'shown = display(HTML("<b>first</b>"), display_id=True)',
    'shown.update(HTML("<b>updated by a later cell</b>"))\n1 + 1',
    'from IPython.display import clear_output\nprint("cleared")\nclear_output(wait=True)\nprint("kept")',
    "import ipywidgets as W\nslider = W.IntSlider(value=3)\nout = W.Output()\ndisplay(slider, out)\n"
    'with out:\n    print("inside the Output widget")',
    "slider.value = 5",
    "import plotly.graph_objects as go\nimport minipipe.viz\ngo.Figure(go.Bar(y=[1, 2]))",
]
FAILING = ["x = 1", 'raise ValueError("the second cell fails")', 'print("never")']

INNER_CONFTEST = """
from pathlib import Path

from tests.support.executed_notebooks import PLUGIN, Recorder, executed  # noqa: F401


def pytest_configure(config):
    root = Path(__file__).parent
    config.pluginmanager.register(Recorder(root, root / "executed"), PLUGIN)
"""
# Listed before the notebooks on the command line: the plugin runs these after nbval's cells.
INNER_TESTS = """
from pathlib import Path

HERE = Path(__file__).parent


def test_reads_a_copy_nbval_left(executed):
    assert executed(HERE / "shown.ipynb") == HERE / "executed" / "shown.ipynb"


def test_reads_a_copy_of_what_nbval_did_not_run(executed):
    assert executed(HERE / "unrun.ipynb") == HERE / "executed" / "unrun.ipynb"


def test_reads_a_notebook_that_failed_under_nbval(executed):
    executed(HERE / "failing.ipynb")


def test_reads_a_notebook_that_fails_when_executed(executed):
    executed(HERE / "failing_unrun.ipynb")
"""

# Ids that differ between two executions: widget models, plotly's figure divs.
RANDOM_IDS = re.compile(
    r"(?<![0-9a-f])([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"(?![0-9a-f])"
)


def same_up_to_ids(thing) -> str:
    return RANDOM_IDS.sub("ID", json.dumps(thing, sort_keys=True))


def widget_states(nb) -> list[str]:
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return sorted(same_up_to_ids(model) for model in state.values())


def write(path, cells) -> None:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)


@pytest.mark.distributed
@pytest.mark.timeout(420)
def test_nbvals_run_leaves_the_copy_nbconvert_would_write(tmp_path):
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_readers.py").write_text(INNER_TESTS)
    for name, cells in (("shown", SHOWN), ("unrun", SHOWN[:2]), ("failing", FAILING), ("failing_unrun", FAILING)):
        write(tmp_path / f"{name}.ipynb", cells)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--nbval-lax",
            "--nbval-current-env",
            "test_readers.py",
            "shown.ipynb",
            "failing.ipynb",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    said = done.stdout + done.stderr
    for test in ("test_reads_a_copy_nbval_left", "test_reads_a_copy_of_what_nbval_did_not_run"):
        assert f"PASSED test_readers.py::{test}" in said, said[-5000:]
    # nbval's own failure, then the readers': each names the notebook and the cell
    assert "FAILED failing.ipynb::Cell 1" in said, said[-5000:]
    assert "failing.ipynb failed in this run (Cell 1; see its test)" in said, said[-5000:]
    assert "failing_unrun.ipynb, Cell 1 failed" in said and "the second cell fails" in said, said[-5000:]
    assert not (tmp_path / "executed" / "failing.ipynb").exists(), "a failed notebook left a copy to read"

    recorded = nbformat.read(tmp_path / "executed" / "shown.ipynb", as_version=4)
    reference = nbformat.read(
        # nbclient's own cell timeout well inside the test's: a kernel that stops answering is then shut down by
        # nbclient, not left running to fail every later test that counts processes (CI saw one hang once)
        site_builder().execute(tmp_path / "shown.ipynb", tmp_path / "reference.ipynb", timeout=90),
        as_version=4,
    )
    for cell, ours, theirs in zip(SHOWN, recorded.cells, reference.cells):
        assert same_up_to_ids(ours.outputs) == same_up_to_ids(theirs.outputs), cell
        assert ours.execution_count == theirs.execution_count, cell
    assert widget_states(recorded) == widget_states(reference) != []
    # what the comparison rests on: the later update, the cleared output, the capture, the figure's HTML
    text = json.dumps(recorded.cells[0].outputs) + json.dumps(recorded.cells[2].outputs)
    assert "updated by a later cell" in text and "kept" in text and "cleared" not in text
    assert "inside the Output widget" in json.dumps(recorded.metadata.widgets)
    assert "text/html" in recorded.cells[-1].outputs[-1].data
    unrun = nbformat.read(tmp_path / "executed" / "unrun.ipynb", as_version=4)
    assert [c.execution_count for c in unrun.cells] == [1, 2]
