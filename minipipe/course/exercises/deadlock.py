"""Exercise 04: fix a deadlock. A hand-written 1F1B for p = 3 whose ranks 0 and 1 got each other's
warm-up: each waits for the other. The learner reorders the lists; the checker proves the fix
runs before any process starts, and shows the validator's marked grid when it does not."""
from __future__ import annotations

from collections import Counter

from ...schedule.ir import Schedule
from ...schedule.validate import ScheduleError, validate
from ...sim.pipeline import simulate
from . import schedules as sch
from .runs import TINY, as_schedule, run_real
from .verdict import Mistake, call, verdict

BROKEN = """\
rank 0: 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3
rank 1: 1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3
rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3
"""


def broken() -> Schedule:
    return Schedule.from_text(BROKEN)


def _answer(fixed) -> Schedule:
    value = call(fixed, name="fixed")
    b = broken()
    if isinstance(value, str):
        try:
            return Schedule.from_text(value)
        except ValueError as e:
            raise Mistake(f"fixed() returned text that is not a schedule: {e}") from None
    return as_schedule(value, "fixed()", b.p, b.m)


def _same_actions(fixed) -> str:
    s, b = _answer(fixed), broken()
    if s.p != b.p:
        raise Mistake(f"your schedule has {s.p} ranks; the broken one has {b.p}: keep one list per rank")
    for r in range(b.p):
        mine, theirs = Counter(s.actions[r]), Counter(b.actions[r])
        added, removed = sorted(map(str, mine - theirs)), sorted(map(str, theirs - mine))
        if added or removed:
            what = "; ".join(part for part in (f"removed {', '.join(removed)}" if removed else "",
                                                f"added {', '.join(added)}" if added else "") if part)
            raise Mistake(f"rank {r}: you {what}. A fix changes the order of a rank's actions only: every "
                          f"forward and backward still has to run once, on the rank that owns its stage")
    return "only the order changed"


def _runs(fixed) -> str:
    try:
        validate(_answer(fixed))
    except ScheduleError as e:
        raise Mistake(f"it still cannot run (no process was started):\n{e}") from None
    return "the validator's replay finishes: no cycle of waits"


def _fast(fixed) -> str:
    s = _answer(fixed)
    mine = simulate(s, sch.COSTS).makespan
    bound = (s.m + s.p - 1) * (sch.COSTS.forward + sch.COSTS.backward)
    if mine > bound + 1e-9:
        raise Mistake(f"it runs, but takes {mine:g} time units (forward 1, backward 2), where a pipeline that only idles "
                      f"to fill and drain takes (m + p − 1)(f + b) = {bound:g}: some rank waits for work it could "
                      f"overlap. Let each rank run forwards while the gradients it waits for are on their way.\n\n{s}")
    return f"{mine:g} time units, (m + p − 1)(f + b)"


def _real(fixed) -> str:
    from ...engine.config import RunConfig

    s = _answer(fixed)
    config = RunConfig(schedule=s, **TINY)
    result = run_real([config], ["your fixed schedule"])[0]
    return f"p={s.p}, m={s.m} on {s.p} processes: the whole model's losses ({result.losses[-1]:.4f} at the last step)"


def check_deadlock_fixed(fixed) -> None:
    """Check the learner's fix of BROKEN: the same actions in a new order, proven to run (the
    marked grid if not), no slower than fill and drain, and then a real run."""
    verdict([
        ("the same actions, each on its own rank", lambda: _same_actions(fixed)),
        ("no deadlock", lambda: _runs(fixed)),
        ("as fast as a pipeline", lambda: _fast(fixed)),
        ("a real run", lambda: _real(fixed)),
    ])
