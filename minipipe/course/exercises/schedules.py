"""Checks shared by the exercises where the learner writes a schedule (02 GPipe, 03 1F1B, 04 the
deadlock): is it valid, how long does it take, how much does each rank hold, does it train."""
from __future__ import annotations

from ...schedule.ir import Schedule
from ...schedule.kinds import make_schedule
from ...schedule.validate import ScheduleError, validate
from ...sim.costs import Costs
from ...sim.pipeline import simulate
from .runs import TINY, as_schedule, run_real
from .verdict import Mistake, call

COSTS = Costs(forward=1.0, backward=2.0)   # time units: a backward costs two forwards
RUN_P, RUN_M = 2, 4                        # the real run


def generate(fn, p: int, m: int) -> Schedule:
    name = getattr(fn, "__name__", "your function")
    return as_schedule(call(fn, p, m, name=f"{name}({p}, {m})"), f"{name}({p}, {m})", p, m)


def valid(fn, cases) -> str:
    """Every (p, m) gives a schedule the validator accepts; a rejection shows its marked grid."""
    for p, m in cases:
        s = generate(fn, p, m)
        try:
            validate(s)
        except ScheduleError as e:
            raise Mistake(f"at p={p}, m={m} the validator rejects it:\n{e}") from None
    return f"{len(cases)} (p, m) pairs, p up to {max(p for p, _ in cases)}, m up to {max(m for _, m in cases)}"


def warmup(s: Schedule, rank: int) -> int:
    """Forwards a rank runs before its first backward."""
    acts = s.actions[rank]
    return next((i for i, a in enumerate(acts) if a.op != "F"), len(acts))


def makespan_like(fn, kind: str, cases, explain) -> str:
    """Under COSTS the schedule takes as long as `kind` does; `explain(s, mine, right)` names a
    known mistake (or returns "")."""
    for p, m in cases:
        s = generate(fn, p, m)
        mine, right = simulate(s, COSTS).makespan, simulate(make_schedule(kind, p, m), COSTS).makespan
        if abs(mine - right) > 1e-9:
            raise Mistake(f"at p={p}, m={m} (forward {COSTS.forward:g}, backward {COSTS.backward:g} time units) "
                          f"yours takes {mine:g}, {kind} takes {right:g}: (m + p − 1)(f + b) = "
                          f"({m} + {p} − 1)·{COSTS.forward + COSTS.backward:g}. {explain(s, mine, right)}".rstrip())
    return f"(m + p − 1)(f + b) in every case, as {kind}'s"


def real_run(fn, label: str) -> str:
    from ...engine.config import RunConfig

    s = generate(fn, RUN_P, RUN_M)
    config = RunConfig(schedule=s, **TINY)
    result = run_real([config], [label])[0]
    return (f"p={RUN_P}, m={RUN_M}, {config.steps} steps on the MLP: losses "
            f"{', '.join(f'{x:.4f}' for x in result.losses)}, the same as the whole model's")
