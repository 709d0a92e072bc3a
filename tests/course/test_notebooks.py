"""The course's notebooks are committed clean, and nbval runs each one it should (tests/support/notebooks.py).

nbval itself runs them, as part of this suite: pyproject.toml's testpaths name the notebooks and
its addopts turn on `--nbval-lax --nbval-current-env`. Nothing here needs an edit when a lesson
or an exercise is added.
"""

import nbformat
import pytest
from nbclient import NotebookClient

from minipipe.course.kernel import NOTEBOOK_METADATA
from tests.support.notebooks import CLEAN, REPO, RUN, find, ids

ALL = find(CLEAN)
OPENED = ALL + [REPO / "tests" / "support" / "browser" / "demo.ipynb"]  # the browser test opens the demo too


@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_committed_clean(path):
    """No outputs, no execution counts, no widget state: GitHub rejects widget metadata without
    its state, and a lesson's figures are made when it runs, never stored."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert "widgets" not in nb.metadata, f"{path.name} holds widget state: clear it before committing"
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} hold outputs or execution counts; clear them "
        "(JupyterLab: Edit > Clear Outputs of All Cells) before committing"
    )


@pytest.mark.parametrize("path", OPENED, ids=ids(OPENED))
def test_opens_unchanged_in_jupyterlab(path):
    """JupyterLab writes the kernel's name and language into a notebook's metadata when its kernel
    starts, and cell ids into a notebook without them (nbformat < 4.5): either counts as an edit,
    and closing the tab then asks to save what the learner never changed. tests/course/test_browser_open.py
    opens notebooks in JupyterLab and finds them unchanged."""
    nb = nbformat.read(path, as_version=4)
    assert (nb.nbformat, nb.nbformat_minor) >= (4, 5) and all("id" in cell for cell in nb.cells), (
        f"{path.name}: nbformat {nb.nbformat}.{nb.nbformat_minor} or cells without ids; JupyterLab would add them"
    )
    fix = (
        "exercises/build.py writes it"
        if "exercises" in path.parts
        else "set it to minipipe.course.kernel.NOTEBOOK_METADATA"
    )
    assert nb.metadata == NOTEBOOK_METADATA, (
        f"{path.name}: metadata {dict(nb.metadata)} is not what a course kernel reports, "
        f"{NOTEBOOK_METADATA}; JupyterLab would rewrite it on opening ({fix})"
    )


def test_nbval_runs_every_lesson():
    assert set(find(["lessons/*.ipynb"])) <= set(find(RUN)), f"pyproject.toml's testpaths miss lessons: {RUN}"


# Those that start the most machinery: worker processes, a widget, torchrun's rendezvous and torch's pipelining.
TWICE = ["lessons/00_start_here.ipynb", "lessons/15_to_production.ipynb"]


@pytest.mark.distributed
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", TWICE)
def test_a_lesson_runs_twice_in_one_kernel(name, tmp_path):
    """A learner runs all cells, then all cells again, in the same kernel: no process, port or
    registration left from the first pass may break the second."""
    nb = nbformat.read(REPO / name, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str((REPO / name).parent)}}
    )
    code = [index for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    with client.setup_kernel():
        for _ in range(2):
            for index in code:
                client.execute_cell(nb.cells[index], index)  # raises CellExecutionError with the cell on failure
    assert nb.cells[code[-1]].execution_count == 2 * len(code)  # every cell ran, twice
