"""Exercise: write GPipe, `gpipe(p, m)` -> one list of actions per rank, with each rank's
backwards newest first (the last micro-batch's first). The engine's own GPipe runs them oldest
first, so its answer, however it is reached or copied, is refused by that property."""

from __future__ import annotations

from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from . import schedules as sch
from .verdict import Mistake, verdict

# what the learner's code may call, of minipipe and the frameworks (anything else of theirs is refused,
# grading/watch.py): the actions, and the schedule, the validator and the simulator to try things
ALLOWED = (
    "minipipe.schedule.ops",
    "minipipe.schedule.ir.Schedule",
    "minipipe.schedule.validate.validate",
    "minipipe.schedule.validate.ScheduleError",
    "minipipe.sim.pipeline.simulate",
    "minipipe.sim.costs.Costs",
    "minipipe.trace.Trace",
)
FIXED = [(p, m) for p in (3, 4, 2, 1) for m in (4, 8, 1, 3)]


def cases() -> list[tuple[int, int]]:
    return FIXED + sch.drawn(
        4, (2, 8), lambda rng, p, large: rng.randint(81, 256) if large else rng.randint(1, 16), large_p=sch.LARGE_P
    )


def _explain(s, mine, right) -> str:
    if abs(mine - s.p * s.m * (sch.COSTS.forward + sch.COSTS.backward)) < 1e-9:
        return _(
            "That is naive model parallelism: each micro-batch goes all the way forward and back before the "
            "next one starts, so one rank works at a time. GPipe runs every forward first, then every backward."
        )
    return ""


def _peak(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        peaks = simulate(s, sch.COSTS).peak_inflight()
        for r, held in enumerate(peaks):
            if held != m:
                listed = " ".join(map(str, s.actions[r][:24])) + (" ..." if len(s.actions[r]) > 24 else "")
                raise Mistake(
                    _(
                        "at p={p}, m={m} rank {r} holds at most {held} micro-batch at once (its list: {listed}); "
                        "GPipe's ranks each hold all m={m}: every forward comes before the rank's first backward",
                        p=p,
                        m=m,
                        r=r,
                        held=held,
                        listed=listed,
                    )
                    if held == 1
                    else _(
                        "at p={p}, m={m} rank {r} holds at most {held} micro-batches at once (its list: {listed}); "
                        "GPipe's ranks each hold all m={m}: every forward comes before the rank's first backward",
                        p=p,
                        m=m,
                        r=r,
                        held=held,
                        listed=listed,
                    )
                )
    return _("every rank holds all m micro-batches at the turn from forwards to backwards")


def _newest_first(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        for r, acts in enumerate(s.actions):
            order = [a.mb for a in acts if a.op == "B"]
            if order != sorted(order, reverse=True):
                hint = ""
                if order == sorted(order):
                    hint = " " + _(
                        "That is the order of the engine's own GPipe, oldest first, as lesson 03 shows it; this "
                        "exercise asks for the other one."
                    )
                listed = ", ".join(f"B{mb}" for mb in order[:12]) + (" ..." if len(order) > 12 else "")
                raise Mistake(
                    _(
                        "at p={p}, m={m} rank {r} runs its backwards in the order {listed}; write them "
                        "newest first, the last micro-batch's first: B{last}, ..., B0.",
                        p=p,
                        m=m,
                        r=r,
                        listed=listed,
                        last=m - 1,
                    )
                    + hint
                )
    return _("each rank's backwards newest first")


def check_gpipe(gpipe) -> None:
    """Check the learner's GPipe generator: valid, as fast as the formula, holds m micro-batches
    on every rank, backwards newest first, and trains on 2 real processes with the whole model's
    losses."""
    yours, todo = sch.Yours(gpipe, FIXED), cases()
    verdict(
        [
            (_("valid: every forward and backward, on its rank, no deadlock"), lambda: sch.valid(yours, todo)),
            (
                _("makespan under a cost model"),
                lambda: sch.makespan_is(yours, todo, sch.fill_and_drain, "(m + p − 1)(f + b)", _explain),
            ),
            (_("peak memory"), lambda: _peak(yours, todo)),
            (_("the backwards newest first"), lambda: _newest_first(yours, todo)),
            (_("a real run on 2 processes"), lambda: sch.real_run(yours, _("your GPipe"))),
        ]
    )
