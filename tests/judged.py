"""Checkers judged from the tests, two ways.

- `direct(check, *answers)`: the checker runs here and calls the answers here too, through the same
  requests and plain data as a sandbox (sandbox.Handlers, without a watch): fast, no process, for
  the checkers' verdicts on wrong answers. Never what grades: it watches nothing.
- `sandboxed(check, *answers)`: the answers, sent by value, run in a real sandbox (forked from a
  zygote started once per test session), under the exercise's watch, as when a notebook is graded;
  the checker runs here as the judge. For refusals, and for anything about the watch.

Both return the checker's printed verdict, or raise its NotDoneYet or WrongAnswer.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import shutil
import sys
import tempfile
import time

import cloudpickle

from minipipe.course.grading import plain
from minipipe.course.grading.judge import Client, Learner
from minipipe.course.grading.run import allowlists, checker_module
from minipipe.course.grading.sandbox import Handlers


class DirectClient(Client):
    """A Client whose 'sandbox' is this process, unwatched (see the module docstring)."""

    def __init__(self, objects):
        self.handlers = Handlers({})
        self.handlers.objects = list(objects)
        self.deadline, self.refused, self.ended = None, None, None

    def request(self, req, what):
        kind, *args = req
        answer = getattr(self.handlers, f"do_{kind}")(*args)
        return plain.loads(plain.dumps(answer))        # what the wire would carry, and only that

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


def direct(check, *answers) -> str:
    return _run(check, DirectClient(answers), len(answers), _names(answers))


_ZYGOTE = None


def zygote():
    global _ZYGOTE
    if _ZYGOTE is None:
        from minipipe.course.grading.zygote import Zygote

        _ZYGOTE = Zygote()
    return _ZYGOTE


def sandboxed(check, *answers, timeout: float = 120.0, cells: list | None = None) -> str:
    """The answers (sent by value) or `cells` ([(label, learner's, source)]) in a watched sandbox."""
    name = getattr(check, "__name__", check)
    refusals = tempfile.mkdtemp(prefix="minipipe-refusals-")
    client = Client.start(None, allowlists(name), refusals, zygote())
    client.deadline = time.monotonic() + timeout
    try:
        for module in {getattr(a, "__module__", None) for a in answers}:
            if module and module in sys.modules and module.startswith("test"):
                cloudpickle.register_pickle_by_value(sys.modules[module])
        if cells is not None:
            for label, learner, source in cells:
                answer = client.request(("cell", label, learner, source), label)
                if answer[0] != "ok":
                    client.reply(answer, label)
            targets = answers
        else:
            client.reply(client.request(("payload", cloudpickle.dumps(list(answers))), "your answer"), "your answer")
            targets = [f"#{i}" for i in range(len(answers))]
        shown = _names(answers) if cells is None else list(targets)
        learners = [Learner(client, t, s) for t, s in zip(targets, shown)]
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            _check_of(check)(*learners)
        return said.getvalue()
    finally:
        client.stop()
        shutil.rmtree(refusals, ignore_errors=True)
