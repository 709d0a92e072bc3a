"""Exercise: zero bubble, ZB-H1. The learner writes `zb_h1(p, m)` -> one list of actions per rank,
each backward split into I (the input gradient, which the previous stage waits for) and W (the
weight gradient, which nobody waits for). Checked by properties: valid, every backward split, the
step time of the formula m(f + b) + (p − 1)(f + b − 2w) under two cost models, no rank holding
more than p micro-batches (1F1B's most), and the whole model's losses on 2 real processes. The
engine's schedules are out of reach while the learner's function runs; cases are drawn afresh."""
from __future__ import annotations

import random

from ...sim.costs import Costs
from ...sim.pipeline import simulate
from . import schedules as sch
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the actions, and the validator and simulator on
# the learner's own lists
ALLOWED = ("minipipe.schedule.ops", "minipipe.schedule.ir.Schedule", "minipipe.schedule.validate.validate",
           "minipipe.schedule.validate.ScheduleError", "minipipe.sim.pipeline.simulate", "minipipe.sim.costs.Costs",
           "minipipe.trace.Trace")
FIXED = [(4, 8), (3, 6), (2, 4), (4, 4), (5, 7), (2, 2), (1, 3)]
COST_MODELS = (Costs(forward=1.0, backward=2.0, weight=1.0), Costs(forward=1.0, backward=2.0, weight=0.5))


def cases() -> list[tuple[int, int]]:
    rng = random.Random()
    out = []
    for _ in range(4):
        p = rng.randint(2, 6)
        out.append((p, rng.randint(p, 3 * p)))
    p = rng.randint(7, sch.LARGE_P)
    return FIXED + out + [(p, rng.randint(3 * p, 5 * p))]


def zb_h1_step(costs: Costs):
    """m(f + b) + (p − 1)(f + b − 2w): each rank's work, and what stays idle of each fill-and-drain
    slot once the W's fill it (for m >= p and w <= min(f, b − w))."""
    f, b, w = costs.forward, costs.backward, costs.weight
    return lambda p, m: m * (f + b) + (p - 1) * (f + b - 2 * w)


def _split(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        for r, acts in enumerate(s.actions):
            whole = [a for a in acts if a.op == "B"]
            if whole:
                raise Mistake(f"at p={p}, m={m} rank {r} runs {whole[0]}, a whole backward; ZB-H1 splits every backward "
                              f"into I (input gradient) and W (weight gradient): I({whole[0].stage}, {whole[0].mb}) and "
                              f"W({whole[0].stage}, {whole[0].mb})")
    return "no whole B anywhere"


def _explain(s, mine, right) -> str:
    rows = [[(a.op, a.mb) for a in acts] for acts in s.actions]
    if all(row[i + 1] == ("W", mb) for row in rows for i, (op, mb) in enumerate(row) if op == "I"):
        return ("Each W runs right after its I, so the cool-down's idle slots stay empty. Nobody waits for a W: let "
                "rank r put off its W's, keeping up to r of them waiting, into the idle slots of its cool-down.")
    for r, row in enumerate(rows):
        last_i = max(i for i, (op, _) in enumerate(row) if op == "I")
        if s.m > r + 1 and all(i > last_i for i, (op, _) in enumerate(row) if op == "W"):
            return (f"Rank {r} keeps every W for the end, after its last I: they fill only the last slots, and its "
                    f"activations stay until then. Let rank r keep at most r W's waiting, and run the oldest when more "
                    f"are owed.")
    return ""


def _step_times(yours, cases) -> str:
    for costs in COST_MODELS:
        sch.makespan_is(yours, cases, zb_h1_step(costs), "m(f + b) + (p − 1)(f + b − 2w)", _explain, costs)
    return "m(f + b) + (p − 1)(f + b − 2w), with w = 1 and w = 0.5"


def _peaks(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        peaks = simulate(s, COST_MODELS[0]).peak_inflight()
        over = [r for r in range(p) if peaks[r] > p]
        if over:
            r = over[0]
            raise Mistake(f"at p={p}, m={m} rank {r} holds up to {peaks[r]} micro-batches at once (a micro-batch's "
                          f"activations stay until its W); ZB-H1 holds no more than 1F1B's rank 0, p = {p}. Do not keep the W's "
                          f"for the end: let rank r leave at most r of them waiting, and run the oldest when more are "
                          f"owed.")
    return "at most p, 1F1B's peak, on every rank"


def check_zero_bubble(zb_h1) -> None:
    """Check the learner's ZB-H1 (m >= p)."""
    yours, todo = sch.Yours(zb_h1, FIXED), cases()
    verdict([
        ("valid: every forward, I and W, on its rank, no deadlock", lambda: sch.valid(yours, todo)),
        ("every backward split into I and W", lambda: _split(yours, todo)),
        ("makespan under two cost models", lambda: _step_times(yours, todo)),
        ("peak in-flight micro-batches on each rank", lambda: _peaks(yours, todo)),
        ("a real run on 2 processes", lambda: sch.real_run(yours, "your ZB-H1")),
    ])
