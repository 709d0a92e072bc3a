"""Exercise: interleaved 1F1B. The learner places the p·v chunks on the ranks, `placement(p, v)`,
and writes the order, `interleaved(p, m, v)` -> one list of actions per rank. Checked by properties:
the placement goes round the ring (stage s on rank s mod p), the lists are valid on it, the step
takes (m + (p − 1)/v)(f + b), no rank holds more chunks than Megatron's warm-up needs, and the
whole model's losses on 2 real processes. The engine's schedules are out of reach while the
learner's functions run, and the cases are drawn afresh at every check."""

from __future__ import annotations

import random

from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from . import schedules as sch
from .guard import ask
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
FIXED = [(4, 8, 2), (2, 4, 2), (3, 6, 2), (2, 4, 3), (4, 4, 2), (3, 9, 3), (1, 2, 2)]
RUN = (2, 4, 2)  # p, m, v of the real run: 4 chunks of the 4-layer MLP


def cases() -> list[tuple[int, int, int]]:
    rng = random.Random()
    out = []
    for _drawn in range(4):
        p, v = rng.randint(2, 6), rng.randint(2, 4)
        out.append((p, p * rng.randint(1, 4), v))
    # interleaving's v chunks a rank: up to half the ranks of the others; from 11, past the small cases' range and
    # any table of them (p up to 10 let a table of 210 entries pass one check in six)
    p = rng.randint(11, sch.LARGE_P // 2)
    return FIXED + out + [(p, p * rng.randint(5, 8), rng.randint(2, 3))]


def peak_allowed(p: int, m: int, v: int, rank: int) -> int:
    """Megatron's warm-up on rank r, 2(p − r − 1) + (v − 1)p chunk forwards, and the steady state's
    first: the most chunks of micro-batches rank r needs to hold (never more than all m·v)."""
    return min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v)


def _placement_of(placement, p: int, v: int) -> tuple[int, ...]:
    name = f"placement({p}, {v})"
    value = ask(
        placement,
        p,
        v,
        name=name,
        advice=_("place the chunks yourself"),
        take=lambda x: list(x) if isinstance(x, (list, tuple)) else x,
    )
    if not isinstance(value, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in value):
        raise Mistake(
            _(
                "{name} returned {value!r:.60}; return a list of p·v = {n} ranks, the rank of each stage",
                name=name,
                value=value,
                n=p * v,
            )
        )
    if len(value) != p * v:
        raise Mistake(
            _(
                "{name} returned {k} ranks; there are p·v = {n} stages, each needs one",
                name=name,
                k=len(value),
                n=p * v,
            )
        )
    if sorted(value) != sorted(list(range(p)) * v):
        raise Mistake(
            _(
                "{name} returned {value}; each of the {p} ranks must own exactly v = {v} stages",
                name=name,
                value=value,
                p=p,
                v=v,
            )
        )
    return tuple(value)


def _places(placement) -> str:
    for p, _m, v in FIXED:
        mine = _placement_of(placement, p, v)
        right = tuple(s % p for s in range(p * v))
        if mine != right:
            hint = ""
            if mine == tuple(s // v for s in range(p * v)):
                hint = " " + _(
                    "Yours gives each rank v consecutive stages: a micro-batch then stays on one rank for v "
                    "chunks in a row, and the fill and drain are as long as 1F1B's."
                )
            elif p > 1 and v == 2 and mine == tuple(list(range(p)) + list(reversed(range(p)))):
                hint = " " + _("That is the V shape of ZB-V; Megatron's interleaving goes round the ring again.")
            raise Mistake(
                _(
                    "placement({p}, {v}) gives {mine}; interleaved 1F1B goes round the ring of ranks v times, "
                    "stage s on rank s mod p: {right}.",
                    p=p,
                    v=v,
                    mine=list(mine),
                    right=list(right),
                )
                + hint
            )
    return _("stage s on rank s mod p: the activations go round the ring v times")


def _explain(s, mine, right) -> str:
    if abs(mine - sch.fill_and_drain(s.p, s.m)) < 1e-9:
        return _(
            "That is 1F1B's step on the same model: the fill and the drain must be made of chunks, a v-th of a "
            "rank's share each. Run each group of p micro-batches through one chunk, then the next."
        )
    return ""


def _peaks(yours, cases) -> str:
    for p, m, v in cases:
        s = yours(p, m, v)
        peaks = simulate(s, sch.COSTS).peak_inflight()
        for r in range(p):
            allowed = peak_allowed(p, m, v, r)
            if peaks[r] > allowed:
                ahead = sch.warmup(s, r)
                why = " " + _(
                    "It runs {ahead} chunk forwards before its first backward; the warm-up needs "
                    "2(p − r − 1) + (v − 1)p = {warmup}, then one forward and one backward in turn.",
                    ahead=ahead,
                    warmup=allowed - 1,
                )
                raise Mistake(
                    _(
                        "at p={p}, m={m}, v={v} rank {r} holds up to {held} chunks of micro-batches at once, "
                        "where {allowed} are enough.",
                        p=p,
                        m=m,
                        v=v,
                        r=r,
                        held=peaks[r],
                        allowed=allowed,
                    )
                    + why
                )
    return _("no rank holds more chunks than the warm-up 2(p − r − 1) + (v − 1)p, plus one")


def check_interleaved(placement, interleaved) -> None:
    """Check the learner's placement(p, v) and interleaved(p, m, v) (m a multiple of p)."""
    yours = sch.Yours(interleaved, FIXED, placement=lambda p, v: _placement_of(placement, p, v))
    todo = cases()
    verdict(
        [
            (_("the chunks placed round the ring"), lambda: _places(placement)),
            (
                _("valid: every chunk's forward and backward, on its rank, no deadlock"),
                lambda: sch.valid(yours, todo),
            ),
            (
                _("makespan under a cost model"),
                lambda: sch.makespan_is(yours, todo, sch.fill_and_drain, "(m + (p − 1)/v)(f + b)", _explain),
            ),
            (_("peak in-flight chunks on each rank"), lambda: _peaks(yours, todo)),
            (_("a real run on 2 processes"), lambda: sch.real_run(yours, _("your interleaved 1F1B"), *RUN)),
        ]
    )
