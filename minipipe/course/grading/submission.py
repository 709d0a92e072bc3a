"""What a participant's notebook hands in, read against the exercise the course released.

The released exercise (exercises/NN_name.ipynb, as exercises/build.py makes it) has three kinds of
code cells, each with a stable id: *given* cells (imports, the exercise's data), *answer* cells
(tagged `answer`: the stubs the learner fills) and the *check* cell (tagged `check`: the call of
the checker). From the participant's notebook only the learner's code is taken: the answer cells
(matched by id), and every code cell the learner added. The given cells run as released and the
check cell is never run: the judge calls the released check itself, so what became of the
participant's check cells (edited, emptied, deleted, printed over) changes nothing but a note for
the teacher. A notebook whose answer cells are as released, with no cell of the learner's added,
is "not done yet" without running anything (so is one whose answer cells were deleted, with nothing
of the learner's in their place: the deletion is named).

    sub = read_submission("room/participants/ada/exercises/03_one_f_one_b.ipynb")
    sub.cells      # [(label, learner's?, source), ...] in the order they run
    sub.check, sub.targets, sub.notes, sub.untouched
"""

from __future__ import annotations

import ast
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 50 * 2**20  # a notebook larger than this is not an exercise (a runaway output, a mistake)


def released_folder() -> Path:
    import minipipe

    return Path(minipipe.__file__).resolve().parents[1] / "exercises"


def released_exercises() -> dict[str, Path]:
    """{stem: path} of the exercises the course hands out."""
    return {p.stem: p for p in sorted(released_folder().glob("[0-9][0-9]_*.ipynb"))}


def read_file(path: str | Path) -> bytes:
    """The bytes of a notebook file, refusing at once what is not a regular file (a FIFO would
    block a reader forever, a device never ends) or too large to be one; opened without blocking."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such notebook") from None
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a FIFO (named pipe)"
                if stat.S_ISFIFO(info.st_mode)
                else "a socket"
                if stat.S_ISSOCK(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a folder"
                if stat.S_ISDIR(info.st_mode)
                else "not a regular file"
            )
            raise ValueError(f"{path} is {kind}, not a notebook file; it was not read")
        if info.st_size > MAX_BYTES:
            raise ValueError(
                f"{path} holds {info.st_size / 2**20:.0f} MB, more than a notebook of an exercise "
                f"({MAX_BYTES / 2**20:.0f} MB at most); clear its outputs and save it again"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def read_notebook(path: str | Path):
    """The notebook at `path`, or a ValueError that says it is not one."""
    import nbformat

    data = read_file(path)
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as e:  # not UTF-8, not JSON, not a notebook's JSON: nbformat raises several kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{path} is not a Jupyter notebook ({first[:120]}); give an exercise notebook "
            f"(exercises/03_one_f_one_b.ipynb) or a folder of them"
        ) from None


def exercise_of(path: Path, nb) -> str:
    """Which released exercise a notebook is: by its file's name, else by its first cell's title,
    "# Exercise NN · ..." (a copy saved under another name)."""
    known = released_exercises()
    if path.stem in known:
        return path.stem
    first = nb.cells[0].source if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    title = re.match(r"#\s*Exercise\s+(\d\d)\b", first)
    named = [stem for stem in known if title and stem.startswith(title.group(1) + "_")]
    if len(named) == 1:
        return named[0]
    raise ValueError(
        f"{path} is not one of the course's exercises ({', '.join(sorted(known)) or 'none found'}"
        f"); name the notebook after the exercise it answers"
    )


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def same(a: str, b: str) -> bool:
    """The same code but for trailing spaces and blank lines at either end."""

    def norm(text):
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip()

    return norm(a) == norm(b)


def check_call(source: str) -> tuple[str, list[str]]:
    """The checker and the names a released check cell passes it: `check_x(a, b)`."""
    tree = ast.parse(source)
    calls = [n.value for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    if (
        len(calls) != 1
        or not isinstance(calls[0].func, ast.Name)
        or calls[0].keywords
        or not all(isinstance(a, ast.Name) for a in calls[0].args)
    ):
        raise ValueError(f"the released check cell is not one call of a checker on names: {source!r}")
    return calls[0].func.id, [a.id for a in calls[0].args]


def _what(source: str) -> str:
    """How to name an answer cell: its first def or class line."""
    for line in source.splitlines():
        if line.startswith(("def ", "class ")):
            return line.rstrip(":")
    return source.strip().splitlines()[0] if source.strip() else "(empty)"


@dataclass
class Submission:
    path: Path
    exercise: str
    cells: list = field(default_factory=list)  # (label, learner's, source), in the order they run
    check: str = ""
    targets: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    untouched: bool = False
    stubs: list = field(default_factory=list)  # how the answer cells are named, for "not done yet"


def read_submission(path: str | Path) -> Submission:
    path = Path(path)
    nb = read_notebook(path)
    exercise = exercise_of(path, nb)
    released = read_notebook(released_exercises()[exercise])
    theirs = [c for c in nb.cells]
    sub = Submission(path, exercise)
    by_id = {c.get("id"): (i, c) for i, c in enumerate(theirs, 1) if c.get("id")}
    matched: dict[str, tuple[int, object]] = {}
    for rel in released.cells:
        found = by_id.get(rel.get("id"))
        if found is not None and found[1].cell_type == rel.cell_type:
            matched[rel.id] = found
    _match_by_tags(released, theirs, matched)
    used = {i for i, _ in matched.values()}
    anchors = _anchors(released, theirs, matched, used)
    answers_as_released, added = True, False
    for i, cell in anchors.get(None, []):
        added |= bool(cell.source.strip())
        sub.cells.append((f"cell {i} (yours)", True, cell.source))
    for rel in released.cells:
        role = (
            ("check" if "check" in tags(rel) else "answer" if "answer" in tags(rel) else "given")
            if rel.cell_type == "code"
            else "text"
        )
        mine = matched.get(rel.id)
        if role == "check":
            sub.check, sub.targets = check_call(rel.source)
            if mine is None:
                sub.notes.append("the check cell was deleted; the course's check ran instead")
            elif not same(mine[1].source, rel.source):
                sub.notes.append(f"the check cell (cell {mine[0]}) was edited; the course's check ran instead")
        elif role == "given":
            sub.cells.append((f"cell {mine[0] if mine else rel.id} (given)", False, rel.source))
        elif role == "answer":
            sub.stubs.append(f"cell {mine[0] if mine else rel.id}: {_what(rel.source)}")
            if mine is None:
                sub.notes.append(f"your answer cell {rel.id} ({_what(rel.source)}) is not in the notebook")
            else:
                answers_as_released &= same(mine[1].source, rel.source)
                sub.cells.append((f"cell {mine[0]} (yours)", True, mine[1].source))
        for i, cell in anchors.get(rel.id, []):
            if "check" in tags(cell):
                sub.notes.append(f"a cell tagged 'check' was added (cell {i}); it ran as your own code, not as a check")
            added |= bool(cell.source.strip())
            sub.cells.append((f"cell {i} (yours)", True, cell.source))
    sub.untouched = answers_as_released and not added
    if not sub.check:
        raise ValueError(f"the released {exercise} has no check cell")
    return sub


def _match_by_tags(released, theirs, matched) -> None:
    """Cells without ids (a notebook saved by an old tool): answer and check cells by their tags, in order."""
    for tag in ("answer", "check"):
        want = [rel for rel in released.cells if tag in tags(rel) and rel.id not in matched]
        free = [
            (i, c)
            for i, c in enumerate(theirs, 1)
            if tag in tags(c) and not c.get("id") and all(i != j for j, _ in matched.values())
        ]
        for rel, found in zip(want, free):
            matched[rel.id] = found


def _anchors(released, theirs, matched, used) -> dict:
    """The learner's own code cells, each after the released cell that precedes it in their
    notebook (None: before every released cell)."""
    at = {i: rel_id for rel_id, (i, _) in matched.items()}
    out: dict = {}
    anchor = None
    for i, cell in enumerate(theirs, 1):
        if i in at:
            anchor = at[i]
        elif cell.cell_type == "code" and i not in used:
            out.setdefault(anchor, []).append((i, cell))
    return out
