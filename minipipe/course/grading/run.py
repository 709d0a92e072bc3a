"""Grading one notebook, or one notebook's answers, in a fresh judge process.

    result = grade_notebook("room/participants/ada/exercises/03_one_f_one_b.ipynb", timeout=600)
    result.status, result.text, result.notes       # passed | not done yet | wrong | error | timed out | died

The judge (`python -m minipipe.course.grading`, __main__.py) is started for each notebook, in a
session of its own and with a token in its environment that everything below it inherits
(procs.py). It forks the sandbox, runs the cells there one by one (each within `timeout`
seconds), runs the released check (within `timeout` too), and writes its result as JSON on its
standard output, a pipe that only the judge holds (the sandbox closed its copy before any of the
learner's code ran). Whatever happens, every process of the grading is ended before this returns.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..i18n import language
from ..i18n.messages import say as _
from . import procs

STATUSES = ("passed", "not done yet", "wrong", "error", "timed out", "died")
START = 120.0  # seconds a judge may take to start and to end, besides its cells
# the package's lazy names (what they give is judged where it is called), and the checkers' words: a harness
# (harness.py) that words a Mistake in the sandbox calls say(), and counts as the learner when it does
ALWAYS = ("minipipe.__getattr__", "minipipe.course.i18n.messages.say")


@dataclass
class CellReport:
    label: str
    status: str  # raised | timed out | died | refused
    text: str


@dataclass
class GradeResult:
    path: Path | None
    status: str
    text: str
    cells: list[CellReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# -- the exercise's lists --------------------------------------------------------------------------
def checker_module(check: str) -> str:
    from ..exercises import CHECKERS

    if check not in CHECKERS:
        raise ValueError(f"{check} is not one of the course's checkers ({', '.join(sorted(CHECKERS))})")
    return f"minipipe.course.exercises.{CHECKERS[check]}"


def allowlists(check: str) -> dict[str, tuple[str, ...]]:
    """{"answer": what the learner's code may call while the check calls it, "given": what of the
    checker's own code the exercise hands out for the learner's cells (its given cells import it)},
    read from the checker module's ALLOWED and GIVEN without importing it (so that the sandbox,
    forked before judging, holds nothing of the checker's). While the cells run, the rest of
    minipipe is theirs to use (grading/watch.py)."""
    import importlib.util

    from ..exercises import CHECKERS

    spec = importlib.util.find_spec(checker_module(check))
    tree = ast.parse(Path(spec.origin).read_text())
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("ALLOWED", "GIVEN")
        ):
            found[node.targets[0].id] = tuple(ast.literal_eval(node.value))
    if "ALLOWED" not in found:
        raise ValueError(f"{spec.origin} declares no ALLOWED: what the learner's code may call")
    entries = tuple(f"minipipe.course.exercises.{name}" for name in CHECKERS)  # a check called in a cell: a no-op
    answer = found["ALLOWED"] + ALWAYS + entries
    return {"answer": answer, "given": found.get("GIVEN", ())}


# -- a judge process ------------------------------------------------------------------------------
def judge_in_process(request: dict, timeout: float, become=None, cwd=None) -> dict:
    """Run a judge on `request` (see __main__.py) and return its result; within (cells + 1) ×
    timeout + START seconds in all, and with every process it started ended afterwards.
    `become`: what the sandbox does, still root, before the learner's code runs (a function of no
    arguments, sent by value: a participant's cgroup and cores, then their Unix user,
    workshop/accounts.py); the judge itself stays this process's user, out of the learner's reach. `cwd`:
    where the learner's cells run (the notebook's folder)."""
    token = uuid.uuid4().hex
    env = dict(os.environ, **{procs.TOKEN: token})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")]))
    if cwd is None:  # answers sent from a notebook: the verdict in that notebook's language
        env.setdefault("MINIPIPE_LANG", language())
    limit = (len(request.get("cells") or []) + 1) * timeout + START
    if become is not None:
        import base64

        import cloudpickle

        request = {**request, "become": base64.b64encode(cloudpickle.dumps(become)).decode()}
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minipipe.course.grading"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
            start_new_session=True,
            cwd=cwd,
        )
        try:
            out, _err = proc.communicate(json.dumps({**request, "timeout": timeout}).encode(), timeout=limit)
        except subprocess.TimeoutExpired:
            return {
                "status": "timed out",
                "text": _("timed out: the grading did not end within {limit:g} s, so it was stopped", limit=limit),
                "cells": [],
            }
        finally:
            procs.end_all(proc.pid, token)
            proc.kill()
            proc.wait()
        try:
            return json.loads(out.decode())
        except ValueError:
            errors.seek(0)
            said = errors.read().decode(errors="replace")[-3000:].strip()
            return {
                "status": "error",
                "text": _("the grader itself failed (exit code {code}):\n{said}", code=proc.returncode, said=said),
                "cells": [],
            }


def _package_root() -> str:
    import minipipe

    return str(Path(minipipe.__file__).resolve().parents[1])


def _result(path, judged: dict, notes) -> GradeResult:
    cells = [CellReport(c["label"], c["status"], c["text"]) for c in judged.get("cells", [])]
    return GradeResult(path, judged["status"], judged["text"], cells, list(notes))


def grade_notebook(path: str | Path, timeout: float = 600.0, become=None) -> GradeResult:
    """Judge a participant's notebook: its answer cells and the cells it added, in the released
    exercise, with the released check (submission.py), the cells run in the notebook's folder (and,
    with `become`, as its participant: judge_in_process). A ValueError when it cannot be read as one
    of the course's exercises."""
    from .submission import read_submission

    sub = read_submission(path)
    if sub.untouched:
        return GradeResult(
            Path(path),
            "not done yet",
            "… "
            + _(
                "not done yet: your answer cells are as the exercise hands them out ({stubs}). Write your code "
                "where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()` line).",
                stubs="; ".join(sub.stubs),
            ),
            [],
            sub.notes,
        )
    judged = judge_in_process(
        {"check": sub.check, "targets": sub.targets, "cells": sub.cells},
        timeout,
        become,
        cwd=str(Path(path).resolve().parent),
    )
    return _result(Path(path), judged, sub.notes)


def judge_objects(check: str, answers: tuple, timeout: float = 600.0) -> GradeResult:
    """Judge a notebook's answers themselves (the check cell in JupyterLab): sent by value
    (cloudpickle) to a fresh judge."""
    import cloudpickle

    for module in {getattr(a, "__module__", None) for a in answers}:
        if module and module != "__main__" and module in sys.modules and not _importable_afresh(sys.modules[module]):
            cloudpickle.register_pickle_by_value(sys.modules[module])
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        try:
            f.write(cloudpickle.dumps(list(answers)))
        except Exception as e:
            return GradeResult(
                None,
                "wrong",
                "✗ "
                + _(
                    "your answer cannot be sent to the grader ({kind}: {error}); "
                    "it needs functions and classes that it can copy",
                    kind=type(e).__name__,
                    error=e,
                ),
            )
        f.flush()
        judged = judge_in_process(
            {"check": check, "targets": [f"#{i}" for i in range(len(answers))], "payload": f.name}, timeout
        )
    return _result(None, judged, [])


def _importable_afresh(module) -> bool:
    """Whether a fresh process would import `module` by its name: an installed package, or minipipe."""
    f = getattr(module, "__file__", None)
    if f is None:
        return True
    f = str(Path(f).resolve())
    return f.startswith(_package_root() + os.sep + "minipipe") or "site-packages" in f or f.startswith(sys.prefix)
