"""The gradebook: `minipipe check` over every participant's exercises, as one table.

    book = grade("room")                    # a room (room/participants/NAME/exercises/) or any folder
    book.write("gradebook")                 # gradebook/gradebook.csv and gradebook/gradebook.html

A folder of participants holds one folder per participant, with their exercise notebooks in it or
in its exercises/ folder (a room's participants/ folder, or the notebooks collected from laptops).
Each notebook is judged by the course's grader (course/grading/, what `minipipe check` does): the
participant's answer cells and the cells they added run in the released exercise, in a sandbox, and
the released check is called on them in a fresh judge process. Nothing the notebook says of itself
counts: a check cell printed over, muted, rebound, emptied or deleted changes no verdict, and an
untouched stub is "not yet" however its check cells look; a check cell that was edited or deleted
is noted beside the verdict for the teacher. A cell of the table is passed, not yet (a stub left,
or no notebook) or wrong, with the checker's message — a wrong answer, an error, a cell that timed
out or a sandbox that died. A file that is not a regular file (a FIFO) is refused without being
read. In a room whose hub limits its participants, each notebook's sandbox (where the participant's
code runs) is put in its owner's cgroup and on their cores: a notebook that fills memory is stopped
inside its owner's share ("died"); where the room's participants are Unix users of their own, the
sandbox becomes its owner before their code runs (workshop/accounts.py), and the judge, which
computes the verdict, stays the teacher's.
"""

from __future__ import annotations

import csv
import functools
import html
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..course.exercises.notebook import check_timeout
from ..course.exercises.verdict import FAIL, PASS, TODO
from ..course.grading.run import grade_notebook
from .accounts import as_participant
from .limits import Cgroups, Limits
from .room import course_files

VERDICT = {"passed": "passed", "not done yet": "not yet"}  # anything else: wrong
MARK = {"passed": PASS, "not yet": TODO, "wrong": FAIL}
COLOUR = {"passed": "#009E73", "not yet": "#999999", "wrong": "#D55E00"}  # Okabe–Ito: green, grey, vermilion


@dataclass(frozen=True)
class Mark:
    verdict: str  # passed | not yet | wrong
    message: str  # the checker's words (empty when passed)
    notes: tuple = ()  # what the teacher should know besides: a check cell edited or deleted, an answer cell deleted


@dataclass
class Gradebook:
    participants: list[str]
    exercises: list[str]
    marks: dict[tuple[str, str], Mark] = field(default_factory=dict)
    not_graded: list[Path] = field(default_factory=list)  # notebooks not named as an exercise (copies)

    def mark(self, participant: str, exercise: str) -> Mark:
        return self.marks.get((participant, exercise), Mark("not yet", "no such notebook in the folder"))

    def counts(self, exercise: str) -> dict[str, int]:
        verdicts = [self.mark(p, exercise).verdict for p in self.participants]
        return {v: verdicts.count(v) for v in MARK}

    def write(self, out: str | Path) -> tuple[Path, Path]:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "gradebook.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["participant", "exercise", "verdict", "message", "notes"])
            for p in self.participants:
                for e in self.exercises:
                    m = self.mark(p, e)
                    w.writerow([p, e, m.verdict, m.message, "; ".join(m.notes)])
        (out / "gradebook.html").write_text(self.html())
        return out / "gradebook.csv", out / "gradebook.html"

    def html(self) -> str:
        head = "".join(
            f"<th title='{html.escape(e)}'>{html.escape(e[:2])}<br><small>{html.escape(e[3:])}</small></th>"
            for e in self.exercises
        )
        rows = []
        for p in self.participants:
            cells = []
            for e in self.exercises:
                m = self.mark(p, e)
                text = html.escape(m.message) or "&nbsp;"
                flag = f" <span class='note' title='{html.escape('; '.join(m.notes))}'>⚑</span>" if m.notes else ""
                notes = "".join(f"<p class='note'>⚑ {html.escape(n)}</p>" for n in m.notes)
                cells.append(
                    f"<td style='background:{COLOUR[m.verdict]}22'><details><summary style='color:"
                    f"{COLOUR[m.verdict]}'><b>{MARK[m.verdict]} {m.verdict}</b>{flag}</summary>{notes}"
                    f"<pre>{text}</pre></details></td>"
                )
            done = sum(self.mark(p, e).verdict == "passed" for e in self.exercises)
            rows.append(f"<tr><th>{html.escape(p)}</th><td>{done}/{len(self.exercises)}</td>{''.join(cells)}</tr>")
        totals = "".join(f"<td>{self.counts(e)['passed']}/{len(self.participants)}</td>" for e in self.exercises)
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Gradebook</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #ccc; padding: 4px 6px; vertical-align: top; }}
td pre {{ white-space: pre-wrap; max-width: 40em; font-size: 85%; margin: 4px 0; }} summary {{ cursor: pointer; }}
.note {{ color: #CC79A7; font-size: 85%; margin: 2px 0; }}
</style></head><body>
<h1>Gradebook</h1>
<p>{len(self.participants)} participants × {len(self.exercises)} exercises, each notebook judged by the course's grader
(<code>minipipe check</code>): the participant's answer cells run in the released exercise, with the released check.
{PASS} passed · {TODO} not yet (a stub left, or no notebook) · {FAIL} wrong (the checker's message, an error,
a timeout) · ⚑ a note (a check cell edited or deleted, which changes no verdict). Click a cell for the message.</p>
<table><tr><th>participant</th><th>passed</th>{head}</tr>
{"".join(rows)}
<tr><th>passed by</th><td></td>{totals}</tr></table>
</body></html>
"""


def course_exercises() -> set[str]:
    """The exercises the course hands out (03_one_f_one_b, ...): the gradebook's columns."""
    return {Path(rel).stem for rel in course_files() if rel.startswith("exercises/") and rel.endswith(".ipynb")}


def participant_folders(folder: str | Path) -> dict[str, Path]:
    """{participant: the folder with their exercise notebooks}, from a room or a folder of participants."""
    folder = Path(folder)
    base = folder / "participants" if (folder / "participants").is_dir() else folder
    if not base.is_dir():
        raise ValueError(
            f"{folder}: no such folder; give a workshop's room folder or a folder with one folder per participant"
        )
    found = {}
    for p in sorted(q for q in base.iterdir() if q.is_dir() and not q.name.startswith(".")):
        found[p.name] = p / "exercises" if (p / "exercises").is_dir() else p
    if not found:
        raise ValueError(
            f"{base} holds no participant folders (one folder per participant, with their exercise "
            f"notebooks in it or in its exercises/ folder)"
        )
    return found


def within_limits(folder: str | Path, names: list[str]) -> dict:
    """{participant: a function that puts the calling process in their cgroup and on their cores},
    for a room whose hub made cgroups (limits.py): a notebook's sandbox counts against its owner's
    memory and tasks, so one that blows up is stopped inside their share, not the machine's. {} for
    any other folder."""
    folder = Path(folder)
    hub = folder.parent / "hub" if folder.name == "participants" else folder / "hub"
    if not (hub / "limits.json").exists():
        return {}
    settings = json.loads((hub / "limits.json").read_text())
    groups = Cgroups.from_settings(settings.get("cgroups"))
    slices = json.loads((hub / "slices.json").read_text())
    if groups is None:
        return {}
    out = {}
    for name in names:
        lim = settings["limits"].get(name)
        if lim is None or name not in slices:
            continue
        groups.make(name, Limits(lim["memory"], lim["tasks"], tuple(slices[name]["cores"])))  # if never started
        cores = set(slices[name]["cores"])
        out[name] = functools.partial(_join, groups, name, cores)
    return out


def _join(groups: Cgroups, name: str, cores: set[int]) -> None:
    os.sched_setaffinity(0, cores)
    groups.join(name)


def grade(
    folder: str | Path, timeout: float = 600.0, jobs: int = 1, only: list[str] | None = None, progress=None
) -> Gradebook:
    """Judge every participant's exercise notebooks (those named in `only`, e.g. ["03_one_f_one_b"]);
    in a room whose hub limits its participants, each within its owner's limits and cores, and as
    its owner where they are users of their own."""
    timeout = check_timeout(timeout)
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs is how many notebooks run at once; a whole number >= 1, got {jobs!r}")
    folders = participant_folders(folder)
    wanted = set(only) if only is not None else course_exercises()
    found = [(p, nb) for p, f in folders.items() for nb in sorted(f.glob("[0-9][0-9]_*.ipynb"))]
    todo = {(p, nb.stem): nb for p, nb in found if nb.stem in wanted}
    exercises = sorted({e for _, e in todo} | set(only or []))
    book = Gradebook(list(folders), exercises)
    # JupyterLab's "Duplicate" makes 03_one_f_one_b-Copy1.ipynb: not a column of its own, but named
    book.not_graded = [nb for _, nb in found if nb.stem not in wanted]
    limited = within_limits(folder, list(folders))
    # as root, in a room whose participants are users of their own: each sandbox becomes its participant
    become = {p: as_participant(folder, p, limited.get(p)) for p in folders}

    def one(key):
        try:
            result = grade_notebook(todo[key], timeout, become[key[0]])
        except ValueError as e:  # not a notebook (broken JSON, a FIFO, a file saved half-way): its own words
            return key, Mark("wrong", f"could not grade: {e}")
        except Exception as e:  # a judge that would not start: say so in its cell
            return key, Mark("wrong", f"could not grade: {type(e).__name__}: {e}")
        return key, mark_of(result)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for key, mark in pool.map(one, todo):
            book.marks[key] = mark
            if progress is not None:
                progress(key, mark)
    return book


def mark_of(result) -> Mark:
    """A notebook's verdict, the grader's message, and the notes for the teacher."""
    verdict = VERDICT.get(result.status, "wrong")
    notes = tuple(result.notes)
    if verdict == "passed":
        return Mark("passed", "", notes)
    detail = [] if result.status in ("wrong", "not done yet") else [f"{result.status}:"]
    cells = [f"{c.label}: {c.status}: {c.text}" for c in result.cells]
    return Mark(verdict, "\n".join([*detail, result.text.strip(), *cells])[:2000], notes)
