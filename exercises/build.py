"""Make the exercise notebooks from their sources: `python exercises/build.py` (or `make exercises`).

Each exercise has one source, `exercises/source/NN_name.py`, a notebook in jupytext's percent
format (readable and diffable as text; JupyterLab opens it as a notebook with jupytext installed).
The reference solution is written in it between `### BEGIN SOLUTION` and `### END SOLUTION`,
nbgrader's markers. From it come two committed notebooks:

    exercises/NN_name.ipynb            the learner's: nbgrader's ClearSolutions preprocessor
                                       replaces each marked region with a stub that raises
                                       NotImplementedError, which the check cell reports as
                                       "not done yet"
    exercises/solutions/NN_name.ipynb  the reference solution: the source without the marker
                                       lines; nbval runs it in the test suite, and it must pass

`python exercises/build.py --check` builds them in memory and fails, naming the files, if the
committed notebooks differ from what the sources make (tests/course/test_exercises.py runs it in CI).

What the grader (minipipe/course/grading/) reads of them: every cell has a stable id (`c00`, `c01`,
... by its place in the source), the cells that hold a solution are tagged `answer` (the learner's
code: the grader takes these, and the cells the learner adds, from a participant's notebook), the
and the cell tagged `check` is the check cell (the grader calls the released one, never the
participant's). The first cell's title, "# Exercise NN · ...", says which exercise a copy saved under
another name is.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import jupytext
import nbformat
from nbgrader.preprocessors import ClearSolutions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's minipipe, whichever one is installed
from minipipe.course.kernel import NOTEBOOK_METADATA  # noqa: E402

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "source"
SOLUTIONS = HERE / "solutions"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
# what a course kernel tells JupyterLab, so that an exercise opens unchanged (minipipe/course/kernel.py)
METADATA = NOTEBOOK_METADATA


def read_source(path: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(path, fmt="py:percent")
    nb.metadata = copy.deepcopy(METADATA)
    nb.nbformat, nb.nbformat_minor = 4, 5
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i:02d}"  # stable ids: a rebuild changes nothing that did not change
        cell.metadata.pop("lines_to_next_cell", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if BEGIN in cell.source and "answer" not in cell.metadata.get("tags", []):
                cell.metadata["tags"] = [*cell.metadata.get("tags", []), "answer"]
    return nb


def learner_notebook(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = copy.deepcopy(source)
    clear = ClearSolutions(
        enforce_metadata=False, code_stub={"python": STUB}, begin_solution_delimeter=BEGIN, end_solution_delimeter=END
    )
    nb, _ = clear.preprocess(nb, {})
    return nb


def solution_notebook(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n") if line.strip() not in (BEGIN, END))
        if cell.cell_type == "markdown":  # links are written from exercises/, one folder up
            cell.source = cell.source.replace("](../", "](../../")
    return nb


def outputs() -> dict[Path, str]:
    """Every generated notebook's path and text."""
    made = {}
    for src in sorted(SOURCES.glob("[0-9][0-9]_*.py")):
        nb = read_source(src)
        for folder, notebook in ((HERE, learner_notebook(nb)), (SOLUTIONS, solution_notebook(nb))):
            nbformat.validate(notebook)
            made[folder / f"{src.stem}.ipynb"] = nbformat.writes(notebook) + "\n"
    return made


def drift() -> list[str]:
    """Generated notebooks that are missing, differ from their source, or have no source."""
    made = outputs()
    wrong = [str(p.relative_to(HERE.parent)) for p, text in made.items() if not p.exists() or p.read_text() != text]
    stale = [
        str(p.relative_to(HERE.parent))
        for p in [*HERE.glob("[0-9][0-9]_*.ipynb"), *SOLUTIONS.glob("[0-9][0-9]_*.ipynb")]
        if p not in made
    ]
    return sorted(wrong + stale)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed notebooks differ from the sources")
    args = parser.parse_args(argv)
    if args.check:
        problems = drift()
        if problems:
            print("out of date (run `python exercises/build.py` and commit):\n  " + "\n  ".join(problems))
            return 1
        print(f"{len(outputs())} exercise notebooks match their sources")
        return 0
    SOLUTIONS.mkdir(exist_ok=True)
    for path, text in outputs().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
