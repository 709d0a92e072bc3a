"""`ScheduleError`, a schedule that cannot run: the reason in words, and the grid with the actions
it names marked (ir.grid). The checks (validate.py) and the deadlock's explanation (deadlock.py)
raise it; learners catch it as `minipipe.ScheduleError` or from `minipipe.schedule.validate`.
"""

from __future__ import annotations

from collections.abc import Iterable

from .ir import Schedule, grid
from .ops import Action


class ScheduleError(ValueError):
    """A schedule that cannot run. The message holds the reason and the grid, marked."""

    def __init__(self, schedule: Schedule, reason: str, marked: Iterable[tuple[int, int]] = ()) -> None:
        self.reason = reason
        self.marked = list(marked)
        aligned = not self.marked  # a marked grid shows list positions, so the mark is where the action is
        super().__init__(f"{reason}\n\n{grid(schedule, mark=self.marked, aligned=aligned)}")


def index_of(s: Schedule, a: Action) -> tuple[int, int]:
    """Where `a` sits in the grid, (its rank, its position in the rank's list): what a mark names."""
    r = s.placement[a.stage]
    return r, s.actions[r].index(a)
