"""How every exercise's checker reports: a short verdict, in the learner's terms.

    ✓ 4/4 checks passed
      ✓ valid for every p and m tried
      ...

    ✗ 1/4 checks passed
      ✓ valid for every p and m tried
      ✗ makespan: at p=3, m=4 yours takes 24 ms, GPipe 18 ms ...
      · peak memory (not run)

A checker is a list of named checks, run in order. The first that fails stops the rest: a later
check (a real run on worker processes) only makes sense once the earlier ones hold, and a
schedule that cannot run must never reach processes that would wait for it forever.

A failed checker raises, so a script (and `minipipe check`) can tell the outcomes apart:
`NotDoneYet` when the learner's code still raises NotImplementedError (the untouched stub),
`WrongAnswer` when it runs but something is wrong. Both are `ExerciseError`s. In a notebook they
show the verdict alone, not a traceback through the checker's insides.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable

from ..grading.harness import harness
from ..i18n.messages import say as _

PASS, FAIL, SKIP, TODO = "✓", "✗", "·", "…"


class ExerciseError(Exception):
    """A checker's verdict on an answer that is not right yet; str() is the verdict."""

    def __init__(self, verdict: str):
        super().__init__(verdict)
        self.verdict = verdict

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return self.verdict.splitlines()


class NotDoneYet(ExerciseError):
    """The learner's function is still the stub: it raises NotImplementedError."""


class WrongAnswer(ExerciseError):
    """The learner's code runs, and a check names what is wrong."""


@harness  # raised by the checkers' harness in the sandbox too (grading/harness.py)
class Mistake(Exception):
    """Raised inside a check: the message says what is wrong, in the learner's terms. `raised`: the
    learner's own exception, when their code raised one."""

    def __init__(self, message: str = "", raised: BaseException | None = None):
        super().__init__(message)
        self.raised = raised


@harness
class Unfinished(Exception):
    """The learner's function raised NotImplementedError."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def short(value) -> str:
    """A value as a verdict shows it: its repr on one line, cut at 40 characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


Check = tuple[str, Callable[[], "str | None"]]


def verdict(checks: Iterable[Check]) -> None:
    """Run the checks in order and print the verdict; raise NotDoneYet or WrongAnswer at the first
    that fails. A check returns None, or a short note shown beside its tick."""
    checks = list(checks)
    n, lines = len(checks), []
    for i, (name, check) in enumerate(checks):
        try:
            note = check()
        except Unfinished as u:
            raise NotDoneYet(
                f"{TODO} "
                + _(
                    "not done yet: {name} still raises NotImplementedError (0/{n} checks run).\n"
                    "  Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()` "
                    "line), run that cell, then this one again.",
                    name=u.name,
                    n=n,
                )
            ) from None
        except Mistake as m:
            later = [f"  {SKIP} " + _("{check} (not run)", check=rest) for rest, _unused in checks[i + 1 :]]
            detail = textwrap.indent(_wrap(str(m)), "      ")
            passed = f"{FAIL} " + _("{passed}/{n} checks passed", passed=i, n=n)
            raise WrongAnswer("\n".join([passed, *lines, f"  {FAIL} {name}:", detail, *later])) from None
        lines.append(f"  {PASS} {name}" + (f": {note}" if note else ""))
    print("\n".join([f"{PASS} " + _("{passed}/{n} checks passed", passed=n, n=n), *lines]))


def _wrap(text: str, width: int = 100) -> str:
    """Wrap long prose lines; leave lines with runs of spaces (grids, tables) as they are."""
    return "\n".join(
        line if len(line) <= width or "  " in line.strip() else textwrap.fill(line, width) for line in text.splitlines()
    )


def close(mine: float, right: float, rel: float = 1e-6) -> bool:
    return abs(mine - right) <= rel * max(1.0, abs(right))
