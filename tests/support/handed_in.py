"""Participants' notebooks for the tests: a released exercise as a participant might hand it in.

    handed_in(path, "01_scale_the_loss", answer=SOLVED, check="print('✓ 4/4 checks passed')",
              added=["check_loss_scaling = lambda *a: None"])

starts from the learner's notebook the course releases (exercises/NN_name.ipynb): `answer`
replaces the answer cell's source (the first cell tagged `answer`, or the one with that id when a
dict {id: source} is given), `check` the check cell's (None deletes it), `added` are code cells put
after the check cell (or before it, with `added_before`), `delete` removes cells by id.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jupytext
import nbformat

REPO = Path(__file__).resolve().parents[2]
KEEP = object()


def released(exercise: str):
    return nbformat.read(REPO / "exercises" / f"{exercise}.ipynb", as_version=4)


def solution_of(exercise: str) -> dict[str, str]:
    """{answer cell id: the reference solution's source}, from the exercise's source."""
    nb = nbformat.read(REPO / "exercises" / "solutions" / f"{exercise}.ipynb", as_version=4)
    return {c.id: c.source for c in nb.cells if "answer" in c.metadata.get("tags", [])}


def source_answers(exercise: str) -> dict[str, str]:
    """The solution's answer cells with the marker lines (as jupytext reads the source)."""
    nb = jupytext.read(REPO / "exercises" / "source" / f"{exercise}.py")
    return {
        f"c{i:02d}": re.sub(r"\s*### (BEGIN|END) SOLUTION\n", "\n", c.source)
        for i, c in enumerate(nb.cells)
        if "### BEGIN SOLUTION" in c.source
    }


def handed_in(path: Path, exercise: str, answer=KEEP, check=KEEP, added=(), added_before=(), delete=()) -> Path:
    nb = copy.deepcopy(released(exercise))
    cells = []
    answers = [c for c in nb.cells if "answer" in c.metadata.get("tags", [])]
    replace = answer if isinstance(answer, dict) else ({answers[0].id: answer} if answer is not KEEP else {})
    for cell in nb.cells:
        if cell.id in delete:
            continue
        if cell.id in replace:
            cell.source = replace[cell.id]
        if "check" in cell.metadata.get("tags", []):
            cells += [nbformat.v4.new_code_cell(s) for s in added_before]
            if check is None:
                continue
            if check is not KEEP:
                cell.source = check
            cells.append(cell)
            cells += [nbformat.v4.new_code_cell(s) for s in added]
            continue
        cells.append(cell)
    nb.cells = cells
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
