"""Exercise: write 1F1B, `one_f_one_b(p, m)` -> one list of actions per rank, m < p too. Checked by
properties (valid, the fill-and-drain step time, each rank's warm-up and peak of micro-batches
held), on cases drawn afresh, with the engine's schedules out of reach."""

from __future__ import annotations

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
# typical sizes first, so that a verdict shows a case worth reading; m < p included
FIXED = [(p, m) for p in (3, 4, 2, 5, 1) for m in (6, 4, 9, 2, 3, 1)]


def cases() -> list[tuple[int, int]]:
    return FIXED + sch.drawn(
        4, (2, 8), lambda rng, p, large: rng.randint(81, 256) if large else rng.randint(1, 16), large_p=sch.LARGE_P
    )


def _warmups(s) -> str:
    shown = range(min(s.p, 8))
    return _(
        "forwards before the first backward, yours: {yours}; 1F1B's: {right}",
        yours=", ".join(_("rank {r}: {n}", r=r, n=sch.warmup(s, r)) for r in shown),
        right=", ".join(_("rank {r}: {n}", r=r, n=min(s.p - r, s.m)) for r in shown),
    ) + (" ..." if s.p > 8 else "")


def _explain_slow(s, mine, right) -> str:
    short = [r for r in range(s.p) if sch.warmup(s, r) < min(s.p - r, s.m)]
    if short:
        r = short[0]
        return _(
            "Rank {r} runs {n} forward(s) before its first backward, then waits for a gradient "
            "that cannot have come back yet: its warm-up is too short. In 1F1B rank r runs p − r forwards "
            "(at most m) before its first backward: the p − r − 1 of the warm-up, then the steady state's "
            "first.\n{warmups}",
            r=r,
            n=sch.warmup(s, r),
            warmups=_warmups(s),
        )
    for r in range(s.p):
        steady = _steady_break(s, r)
        if steady is not None:
            why = (
                _(
                    "two backwards in a row leave the next stage waiting for the forward that should have come "
                    "between them"
                )
                if "BB" in steady
                else _("two forwards in a row hold one micro-batch more than 1F1B's")
            )
            return _(
                "Rank {r}'s warm-up is right, but after it its actions go {steady}: {why}. In 1F1B's "
                "steady state one forward and one backward take turns (FBFB...) until the forwards run out.",
                r=r,
                steady=steady[:24],
                why=why,
            )
    return ""


def _steady_break(s, r: int) -> str | None:
    """Rank r's actions from its last warm-up forward on, where they do not take turns (F, B, F, B,
    ... until the forwards run out); None where they do."""
    ops, w = "".join(a.op for a in s.actions[r]), sch.warmup(s, r)
    if not w:
        return None
    steady = ops[w - 1 : w - 1 + 2 * (s.m - w + 1)]
    return steady if steady != "FB" * (s.m - w + 1) else None


def _peaks(yours, cases) -> str:
    for p, m in cases:
        s = yours(p, m)
        peaks = simulate(s, sch.COSTS).peak_inflight()
        want = [min(p - r, m) for r in range(p)]
        if peaks != want:
            r = next(r for r in range(p) if peaks[r] != want[r])
            why, ahead = "", sch.warmup(s, r)
            if ahead == want[r] + 1:
                why = " " + _(
                    "It runs {ahead} forwards before its first backward, one too many: an off-by-one "
                    "warm-up. Rank r's warm-up is p − r − 1 forwards, then one forward and one backward in turn.",
                    ahead=ahead,
                )
            elif ahead == m > want[r]:
                why = " " + _("It runs every forward before its first backward: that is GPipe's order, not 1F1B's.")
            raise Mistake(
                _(
                    "at p={p}, m={m} rank {r} holds up to {held} micro-batches at once; in 1F1B rank r holds "
                    "at most min(p − r, m), here {want}.",
                    p=p,
                    m=m,
                    r=r,
                    held=peaks[r],
                    want=want[r],
                )
                + f"{why}\n{_warmups(s)}"
            )
    return _("rank r holds at most min(p − r, m) micro-batches")


def _steady(yours, cases) -> str:
    """After the warm-up, a backward follows every forward: one forward, one backward, in turn."""
    for p, m in cases:
        s = yours(p, m)
        for r in range(p):
            steady = _steady_break(s, r)
            if steady is not None:
                raise Mistake(
                    _(
                        "at p={p}, m={m} rank {r}'s actions after its warm-up go {steady}: in 1F1B's steady "
                        "state one forward and one backward take turns (FBFB...) until the forwards run out",
                        p=p,
                        m=m,
                        r=r,
                        steady=steady[:24],
                    )
                )
    return _("after the warm-up, one forward and one backward in turn")


def check_one_f_one_b(one_f_one_b) -> None:
    """Check the learner's 1F1B: valid (m < p too), as fast as the formula, each rank's peak of
    micro-batches held min(p − r, m), its steady state, and the whole model's losses on 2 real
    processes."""
    yours, todo = sch.Yours(one_f_one_b, FIXED), cases()
    verdict(
        [
            (_("valid: every forward and backward, on its rank, no deadlock"), lambda: sch.valid(yours, todo)),
            (
                _("makespan under a cost model"),
                lambda: sch.makespan_is(yours, todo, sch.fill_and_drain, "(m + p − 1)(f + b)", _explain_slow),
            ),
            (_("peak in-flight micro-batches on each rank"), lambda: _peaks(yours, todo)),
            (_("the steady state: one forward, one backward"), lambda: _steady(yours, todo)),
            (_("a real run on 2 processes"), lambda: sch.real_run(yours, _("your 1F1B"))),
        ]
    )
