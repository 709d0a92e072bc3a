"""Exercise 02: write GPipe as a schedule generator, `gpipe(p, m)` -> one list of actions per rank."""
from __future__ import annotations

from ...schedule.kinds import make_schedule
from ...sim.pipeline import simulate
from . import schedules as sch
from .verdict import Mistake, verdict

CASES = [(p, m) for p in (1, 2, 3, 4) for m in (1, 2, 3, 5, 8)]


def _explain(s, mine, right) -> str:
    naive = simulate(make_schedule("naive", s.p, s.m), sch.COSTS).makespan
    if abs(mine - naive) < 1e-9:
        return ("That is naive model parallelism: each micro-batch goes all the way forward and back before the "
                "next one starts, so one rank works at a time. GPipe runs every forward first, then every backward.")
    return ""


def _peak(fn) -> str:
    for p, m in CASES:
        s = sch.generate(fn, p, m)
        peaks = simulate(s, sch.COSTS).peak_inflight()
        for r, held in enumerate(peaks):
            if held != m:
                raise Mistake(f"at p={p}, m={m} rank {r} holds at most {held} micro-batch{'es' if held != 1 else ''} "
                              f"at once (its list: {' '.join(map(str, s.actions[r]))}); GPipe's ranks each hold all "
                              f"m={m}: every forward comes before the rank's first backward")
    return "every rank holds all m micro-batches at the turn from forwards to backwards"


def check_gpipe(gpipe) -> None:
    """Check the learner's GPipe generator: valid, as fast as GPipe, holds m micro-batches on
    every rank, and trains on 2 real processes with the whole model's losses."""
    verdict([
        ("valid: every forward and backward, on its rank, no deadlock", lambda: sch.valid(gpipe, CASES)),
        ("makespan under a cost model", lambda: sch.makespan_like(gpipe, "gpipe", CASES, _explain)),
        ("peak memory", lambda: _peak(gpipe)),
        ("a real run on 2 processes", lambda: sch.real_run(gpipe, "your GPipe")),
    ])
