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
from ..i18n.messages import say as _
from . import schedules as sch
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the actions, and the validator and simulator on
# the learner's own lists
ALLOWED = (
    "minipipe.schedule.ops",
    "minipipe.schedule.ir.Schedule",
    "minipipe.schedule.validate.validate",
    "minipipe.schedule.validate.ScheduleError",
    "minipipe.sim.pipeline.simulate",
    "minipipe.sim.costs.Costs",
    "minipipe.trace.Trace",
)
FIXED = [(4, 8), (3, 6), (2, 4), (4, 4), (5, 7), (2, 2), (1, 3)]
COST_MODELS = (Costs(forward=1.0, backward=2.0, weight=1.0), Costs(forward=1.0, backward=2.0, weight=0.5))


def cases() -> list[tuple[int, int]]:
    rng = random.Random()
    out = []
    for _drawn in range(4):
        p = rng.randint(2, 6)
        out.append((p, rng.randint(p, 3 * p)))
    # from 11: past the small cases' range and any table of them (p from 7 let a table of p <= 10, m <= 50
    # pass one check in ten)
    p = rng.randint(11, sch.LARGE_P)
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
                raise Mistake(
                    _(
                        "at p={p}, m={m} rank {r} runs {action}, a whole backward; ZB-H1 splits every backward "
                        "into I (input gradient) and W (weight gradient): I({stage}, {mb}) and W({stage}, {mb})",
                        p=p,
                        m=m,
                        r=r,
                        action=whole[0],
                        stage=whole[0].stage,
                        mb=whole[0].mb,
                    )
                )
    return _("no whole B anywhere")


def kept_waiting(row) -> int:
    """The most W's a rank's list keeps waiting: over its W's, how many I's run between a
    micro-batch's I and its W. ZB-H1's rank r keeps r (for m > r)."""
    seen_i, most = {}, 0
    for a in row:
        if a.op == "I":
            seen_i[a.mb] = len(seen_i)
        elif a.op == "W" and a.mb in seen_i:
            most = max(most, len(seen_i) - 1 - seen_i[a.mb])
    return most


def _waiting(s) -> str:
    """Which rank keeps a number of W's waiting other than its r, said in those terms."""
    for r, row in enumerate(s.actions):
        kept, want = kept_waiting(row), min(r, s.m - 1)
        if kept != want:
            what = (
                _(
                    "more than the r idle slots of its cool-down can take: the last of them run after the step "
                    "could have ended, and each keeps its micro-batch's activations longer"
                )
                if kept > want
                else _("so some of the r idle slots of its cool-down stay empty")
            )
            if kept == 0:
                keeps = _("Rank {r} runs each W right after its I (it keeps none waiting)", r=r)
            elif kept == 1:
                keeps = _("Rank {r} keeps up to 1 W waiting (a W runs as late as 1 I after its own I)", r=r)
            else:
                keeps = _(
                    "Rank {r} keeps up to {kept} W's waiting (a W runs as late as {kept} I's after its own I)",
                    r=r,
                    kept=kept,
                )
            return keeps + _(
                "; ZB-H1's rank r keeps r, here {want}: {what}. After each I, run the oldest W once more than r "
                "are owed.",
                want=want,
                what=what,
            )
    return ""


def _held_over(row, p: int) -> str:
    """The forward that takes a rank over p micro-batches held, and the oldest W still owed then."""
    held = []
    for a in row:
        if a.op == "F":
            held.append(a.mb)
            if len(held) > p:
                return _(
                    "It runs {action} while W({stage}, {mb}) is still owed, so {n} micro-batches are held "
                    "then: run the W's owed before the next forward, keeping at most r of them waiting.",
                    action=a,
                    stage=a.stage,
                    mb=held[0],
                    n=len(held),
                )
        elif a.op == "W" and a.mb in held:
            held.remove(a.mb)
    return _("Let rank r leave at most r W's waiting, and run the oldest when more are owed.")


def _explain(s, mine, right) -> str:
    rows = [[(a.op, a.mb) for a in acts] for acts in s.actions]
    if all(row[i + 1] == ("W", mb) for row in rows for i, (op, mb) in enumerate(row) if op == "I"):
        return _(
            "Each W runs right after its I, so the cool-down's idle slots stay empty. Nobody waits for a W: let "
            "rank r put off its W's, keeping up to r of them waiting, into the idle slots of its cool-down."
        )
    for r, (row, acts) in enumerate(zip(rows, s.actions)):
        last_i = max(i for i, (op, _mb) in enumerate(row) if op == "I")
        if kept_waiting(acts) > r + 1 and all(i > last_i for i, (op, _mb) in enumerate(row) if op == "W"):
            return _(
                "Rank {r} keeps every W for the end, after its last I: they fill only the last slots, and its "
                "activations stay until then. Let rank r keep at most r W's waiting, and run the oldest when more "
                "are owed.",
                r=r,
            )
    return _waiting(s)


def _step_times(yours, cases) -> str:
    for costs in COST_MODELS:
        sch.makespan_is(yours, cases, zb_h1_step(costs), "m(f + b) + (p − 1)(f + b − 2w)", _explain, costs)
    return _("m(f + b) + (p − 1)(f + b − 2w), with w = 1 and w = 0.5")


def _peaks(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        peaks = simulate(s, COST_MODELS[0]).peak_inflight()
        over = [r for r in range(p) if peaks[r] > p]
        if over:
            r = over[0]
            raise Mistake(
                _(
                    "at p={p}, m={m} rank {r} holds up to {held} micro-batches at once (a micro-batch's "
                    "activations stay until its W); ZB-H1 holds no more than 1F1B's rank 0, p = {p}.",
                    p=p,
                    m=m,
                    r=r,
                    held=peaks[r],
                )
                + " "
                + (_waiting(s) or _held_over(s.actions[r], p))
            )
    return _("at most p, 1F1B's peak, on every rank")


def check_zero_bubble(zb_h1) -> None:
    """Check the learner's ZB-H1 (m >= p)."""
    yours, todo = sch.Yours(zb_h1, FIXED), cases()
    verdict(
        [
            (_("valid: every forward, I and W, on its rank, no deadlock"), lambda: sch.valid(yours, todo)),
            (_("every backward split into I and W"), lambda: _split(yours, todo)),
            (_("makespan under two cost models"), lambda: _step_times(yours, todo)),
            (_("peak in-flight micro-batches on each rank"), lambda: _peaks(yours, todo)),
            (_("a real run on 2 processes"), lambda: sch.real_run(yours, _("your ZB-H1"))),
        ]
    )
