"""Exercise: fix a deadlock. A hand-written schedule for p = 3, m = 4, 1F1B's order on ranks 0 and 2
and GPipe's on rank 1, in which ranks 0 and 1 wait for each other. The learner repairs it by
moving one action; the checker proves the fix runs before any process starts (the validator's
marked grid when it does not) and that it wastes no time. No engine schedule is one move away
from it, so a pasted engine schedule is refused by the count of moves."""

from __future__ import annotations

from collections import Counter

from ...schedule.ir import Schedule
from ...schedule.validate import ScheduleError, validate
from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from . import schedules as sch
from .guard import ask
from .runs import TINY, run_real
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the actions, the schedule's text form, the
# validator and the simulator
ALLOWED = (
    "minipipe.schedule.ops",
    "minipipe.schedule.ir.Schedule",
    "minipipe.schedule.validate.validate",
    "minipipe.schedule.validate.ScheduleError",
    "minipipe.sim.pipeline.simulate",
    "minipipe.sim.costs.Costs",
    "minipipe.trace.Trace",
)
BROKEN = """\
rank 0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3
rank 1: 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3
rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3
"""


def broken() -> Schedule:
    return Schedule.from_text(BROKEN)


def _answer(fixed) -> Schedule:
    b = broken()

    def take(value):
        if isinstance(value, str):
            try:
                return Schedule.from_text(value).actions
            except ValueError as e:
                raise Mistake(_("fixed() returned text that is not a schedule: {error}", error=e)) from None
        return sch.plain_lists(value, "fixed()", b.p)

    rows = ask(fixed, name="fixed()", advice=_("repair the broken lists yourself"), take=take)
    if len(rows) != b.p:
        raise Mistake(
            _(
                "your schedule has {n} ranks; the broken one has {p}: keep one line per rank",
                n=len(rows),
                p=b.p,
            )
        )
    return Schedule.build("yours", b.p, b.m, 1, rows)


def _same_actions(fixed) -> str:
    s, b = _answer(fixed), broken()
    for r in range(b.p):
        mine, theirs = Counter(s.actions[r]), Counter(b.actions[r])
        added, removed = sorted(map(str, mine - theirs)), sorted(map(str, theirs - mine))
        if added or removed:
            fields = {"r": r, "removed": ", ".join(removed), "added": ", ".join(added)}
            if removed and added:
                said = _("rank {r}: you removed {removed}; added {added}.", **fields)
            elif removed:
                said = _("rank {r}: you removed {removed}.", **fields)
            else:
                said = _("rank {r}: you added {added}.", **fields)
            raise Mistake(
                said
                + " "
                + _(
                    "A fix changes the order of a rank's actions only: every forward and backward still has to "
                    "run once, on the rank that owns its stage"
                )
            )
    return _("only the order changed")


def moves(before, after) -> int:
    """The fewest actions to take out and put back elsewhere to turn one list into the other:
    its length less their longest common subsequence."""
    longest = [[0] * (len(after) + 1) for _ in range(len(before) + 1)]
    for i, a in enumerate(before):
        for j, b in enumerate(after):
            longest[i + 1][j + 1] = longest[i][j] + 1 if a == b else max(longest[i][j + 1], longest[i + 1][j])
    return len(before) - longest[-1][-1]


def _runs(fixed) -> str:
    try:
        validate(_answer(fixed))
    except ScheduleError as e:
        raise Mistake(_("it still cannot run (no process was started):\n{error}", error=e)) from None
    return _("the validator's replay finishes: no cycle of waits")


def _one_move(fixed) -> str:
    s, b = _answer(fixed), broken()
    per_rank = [moves(b.actions[r], s.actions[r]) for r in range(b.p)]
    if sum(per_rank) != 1:
        changed = ", ".join(_("rank {r} {n}", r=r, n=n) for r, n in enumerate(per_rank) if n)
        raise Mistake(
            _(
                "it runs, but you moved {n} actions ({changed}); one move is enough. A repair "
                "changes as little as it can: read the validator's error above, find the one action that stands "
                "too early or too late, and move only that one. (A schedule pasted from the engine, 1F1B's or "
                "GPipe's, is several moves away from this one.)",
                n=sum(per_rank),
                changed=changed,
            )
        )
    return _("one action moved")


def _fast(fixed) -> str:
    s = _answer(fixed)
    mine, bound = simulate(s, sch.COSTS).makespan, sch.fill_and_drain(s.p, s.m)
    if mine > bound + 1e-9:
        raise Mistake(
            _(
                "it runs, but takes {mine:g} time units (forward 1, backward 2), where a pipeline that only idles "
                "to fill and drain takes (m + p − 1)(f + b) = {bound:g}: some rank waits for work it could have "
                "overlapped. Another single move fixes the deadlock without the wait.",
                mine=mine,
                bound=bound,
            )
            + f"\n\n{s}"
        )
    return _("{mine:g} time units, (m + p − 1)(f + b)", mine=mine)


def _real(fixed) -> str:
    from ...engine.config import RunConfig

    s = _answer(fixed)
    config = RunConfig(schedule=s, **TINY)
    result = run_real([config], [_("your fixed schedule")])[0]
    return _(
        "p={p}, m={m} on {p} processes: the whole model's losses ({loss:.4f} at the last step)",
        p=s.p,
        m=s.m,
        loss=result.losses[-1],
    )


def check_deadlock_fixed(fixed) -> None:
    """Check the learner's fix of BROKEN: the same actions, proven to run (the marked grid if not),
    one action moved, no slower than fill and drain, and then a real run."""
    verdict(
        [
            (_("the same actions, each on its own rank"), lambda: _same_actions(fixed)),
            (_("no deadlock"), lambda: _runs(fixed)),
            (_("one action moved"), lambda: _one_move(fixed)),
            (_("as fast as a pipeline"), lambda: _fast(fixed)),
            (_("a real run"), lambda: _real(fixed)),
        ]
    )
