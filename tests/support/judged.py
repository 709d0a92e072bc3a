"""Checkers judged from the tests, two ways.

- `direct(check, *answers)`: the checker runs here and calls the answers here too, through the same
  requests and plain data as a sandbox (sandbox.Handlers, without a watch): fast, no process, for
  the checkers' verdicts on wrong answers. Never what grades: it watches nothing.
- `sandboxed(check, *answers)`: the answers, sent by value, run in a real sandbox (forked from a
  zygote started once per test session), under the exercise's watch, as when a notebook is graded;
  the checker runs here as the judge. For refusals, and for anything about the watch.

Both return the checker's printed verdict, or raise its NotDoneYet or WrongAnswer; while `SAID` is a
list (tests/course/conftest.py makes it one for each test), each verdict is appended to it too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import shutil
import sys
import tempfile
from pathlib import Path

import cloudpickle

from minipipe.course.exercises.verdict import Mistake, NotDoneYet, WrongAnswer
from minipipe.course.grading import plain
from minipipe.course.grading.__main__ import judged
from minipipe.course.grading.judge import Client, Learner
from minipipe.course.grading.run import allowlists, checker_module
from minipipe.course.grading.sandbox import Handlers

SAID: list[tuple[str, str]] | None = None  # (how it ended, the verdict) of each check while a test records


def _recorded(judge):
    @functools.wraps(judge)
    def recording(*args, **kwargs):
        try:
            text = judge(*args, **kwargs)
        except (NotDoneYet, WrongAnswer) as e:
            if SAID is not None:
                SAID.append((type(e).__name__, str(e)))
            raise
        if SAID is not None:
            SAID.append(("passed", text))
        return text

    return recording


class DirectClient(Client):
    """A Client whose 'sandbox' is this process, unwatched (see the module docstring)."""

    def __init__(self, objects):
        self.handlers = Handlers({})
        self.handlers.objects = list(objects)
        self.deadline, self.refused, self.ended = None, None, None

    def request(self, req, what):
        kind, *args = req
        answer = getattr(self.handlers, f"do_{kind}")(*args)
        return plain.loads(plain.dumps(answer))  # what the wire would carry, and only that

    def stop(self):
        pass


def _check_of(check):
    """The real checker behind a notebook's entry point (or the checker itself)."""
    name = getattr(check, "__name__", check)
    return getattr(importlib.import_module(checker_module(name)), name)


def _run(check, client, n: int, shown) -> str:
    learners = [Learner(client, f"#{i}", shown[i]) for i in range(n)]
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        _check_of(check)(*learners)
    return said.getvalue()


def _names(answers):
    return [getattr(a, "__name__", None) for a in answers]


def _as_written(qualname: str) -> str:
    """A function's name as its source spells it: mutmut's runs rename it (x__ask__mutmut_orig for _ask,
    Yours.xǁYoursǁ__call____mutmut_3 for Yours.__call__), and a snapshot must read the same under them."""
    if "__mutmut_" not in qualname:
        return qualname
    parts = re.sub(r"__mutmut_(?:orig|\d+)", "", qualname).split(".")
    return ".".join(p.split("ǁ")[-1] if p.startswith("xǁ") else p.removeprefix("x_") for p in parts)


class AskingClient(DirectClient):
    """A DirectClient that, the first time a checker asks the learner's code from a line of its own, also
    plays that call refused (as the watch refuses a call the exercise does not allow) and keeps what the
    learner would then read, the checker's advice for that question, in `refusals`; then it answers as
    DirectClient does. One run of a solution reaches the advice of every question its check asks."""

    REFUSED = "calls a function this exercise does not allow (a refusal the test plays)"
    TOOLS = ("minipipe.course.grading", "minipipe.course.exercises.guard", "mutmut")  # the place: the checker's line

    def __init__(self, objects):
        super().__init__(objects)
        self.asking, self.places, self.refusals = False, set(), []

    def request(self, req, what):
        self.asking = req[0] in ("call", "harness")
        return super().request(req, what)

    def reply(self, answer, name, advice="", learner_name=None):
        if self.asking:
            self.asking = False
            frame = sys._getframe(1)
            while frame.f_globals.get("__name__", "").startswith(self.TOOLS):
                frame = frame.f_back
            place = (frame.f_code.co_filename, frame.f_lineno, advice)
            if place not in self.places:
                self.places.add(place)
                try:
                    super().reply(("refused", self.REFUSED, ""), name, advice, learner_name)
                except Mistake as refused:  # the name, with the drawn case's arguments, left out: the advice kept
                    self.refusals.append(
                        f"{_as_written(frame.f_code.co_qualname)}: {str(refused).replace(name, '…', 1)}"
                    )
                self.refused = self.ended = None
        return super().reply(answer, name, advice, learner_name)


@_recorded
def direct(check, *answers, client: DirectClient | None = None) -> str:
    return _run(check, client or DirectClient(answers), len(answers), _names(answers))


def solution_judged(exercise: str, refusals: list[str] | None = None) -> str:
    """`direct` on exercise `exercise`'s check with its reference solution's functions (the solution
    notebook's answer cells run here, what they print left out); given a list, `refusals` gets what the
    learner would read were each question refused (AskingClient)."""
    from minipipe.course import exercises
    from minipipe.course.grading.submission import read_submission
    from tests.support.notebooks import REPO

    sub = read_submission(REPO / "exercises" / "solutions" / f"{exercise}.ipynb")
    names: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for label, _whose, source in sub.cells:
            exec(compile(source, f"{exercise} {label}", "exec"), names)
    answers = [names[t] for t in sub.targets]
    asking = AskingClient(answers) if refusals is not None else None
    text = direct(getattr(exercises, sub.check), *answers, client=asking)
    if asking is not None:
        refusals += asking.refusals
    return text


_ZYGOTE = None


def zygote():
    global _ZYGOTE
    if _ZYGOTE is None:
        from minipipe.course.grading.zygote import Zygote

        _ZYGOTE = Zygote()
    return _ZYGOTE


@_recorded
def sandboxed(check, *answers, timeout: float = 120.0, cells: list | None = None) -> str:
    """The answers (sent by value) or `cells` ([(label, learner's, source)], `answers` then the
    names the check is given) in a watched sandbox, judged as the grader judges (__main__.judged):
    the checker's printed verdict, or its NotDoneYet or WrongAnswer (a cell refused, or a sandbox
    that timed out or died, as WrongAnswer with the grader's words)."""
    name = getattr(check, "__name__", check)
    refusals = tempfile.mkdtemp(prefix="minipipe-refusals-")
    client = Client.start(None, allowlists(name), refusals, zygote())
    try:
        with tempfile.NamedTemporaryFile(suffix=".pickle") as payload:
            if cells is None:
                for module in {getattr(a, "__module__", None) for a in answers}:
                    if module and module in sys.modules and module.startswith("test"):
                        cloudpickle.register_pickle_by_value(sys.modules[module])
                payload.write(cloudpickle.dumps(list(answers)))
                payload.flush()
                request = {"check": name, "targets": [f"#{i}" for i in range(len(answers))], "payload": payload.name}
                shown = _names(answers)
            else:
                request, shown = {"check": name, "targets": list(answers), "cells": cells}, None
            result = judged(client, request, timeout, shown)
    finally:
        client.stop()
        shutil.rmtree(refusals, ignore_errors=True)
    if result["status"] == "passed":
        return result["text"]
    raise (NotDoneYet if result["status"] == "not done yet" else WrongAnswer)(result["text"])


def notebook_cells(exercise: str, *added: str, replace: dict | None = None) -> tuple[list, list[str]]:
    """The cells the grader runs for a participant who handed in the reference solution of
    `exercise` (its answer cells in `replace`, {id: source}, replaced) with `added` cells of theirs
    before the check cell, and the names the check cell passes: `sandboxed(check, *names, cells=cells)`."""
    from minipipe.course.grading.submission import read_submission
    from tests.support.handed_in import handed_in, solution_of

    with tempfile.TemporaryDirectory() as folder:
        path = handed_in(
            Path(folder) / f"{exercise}.ipynb",
            exercise,
            answer={**solution_of(exercise), **(replace or {})},
            added_before=list(added),
        )
        sub = read_submission(path)
    return list(sub.cells), list(sub.targets)
