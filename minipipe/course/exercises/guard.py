"""How a checker asks the learner's code: never directly, always through the sandbox.

A checker holds the learner's functions as `Learner`s (grading/judge.py): names in a sandbox
process where the learner's code runs under the exercise's allowlist (its module's ALLOWED).

    value = ask(fn, 3, 4, name="gpipe(3, 4)", advice="write the order yourself", take=plain_lists)

calls the learner's `fn(3, 4)` in the sandbox and gets back plain data (a list of Actions, numbers,
tensors), which `take` then reads here, in the judge. A call the allowlist refuses is a Mistake
that names it, with the advice: "gpipe(3, 4) calls make_schedule, the engine's own schedules
(minipipe.schedule.kinds.make_schedule); write the order yourself". NotImplementedError is
Unfinished (the stub), any other error of the learner's a Mistake that shows it. What has to
happen beside the learner's code (a model's calls watched, a baton handed on, ranks as threads) is
a harness function of the checker's, run there: `in_sandbox(harness_fn, [fn], *args, name=...)`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..grading.judge import in_sandbox

__all__ = ["ask", "in_sandbox"]


def ask(fn, *args, name: str, advice: str = "", take: Callable = lambda value: value, **kwargs):
    """The learner's `fn(*args, **kwargs)`, called in the sandbox; its value made plain there and
    read by `take` here."""
    if not hasattr(fn, "call"):
        from ..i18n.messages import say as _
        from .verdict import Mistake

        raise Mistake(
            _(
                "{name}: the answer is {kind} {answer!r:.60}, not a function of yours",
                name=name,
                kind=type(fn).__name__,
                answer=fn,
            )
        )
    return take(fn.call(args, kwargs, name=name, advice=advice))
