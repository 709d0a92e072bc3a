"""A searched schedule for a planned layout, where its GPUs' memory holds more than its schedule keeps.

The planner ranks the hand-written kinds by their formulas. A layout that fits with room to spare
could hold more micro-batches in flight than its kind does (1F1B's rank r holds p − r); a schedule
found by search under that room (schedule/search.py: the zero-bubble paper's greedy, the
hand-written kinds, and the exact MILP where small) may then be shorter:

    best = plan("llama2-7b", gpus=64)
    pick = searched_for(best.setup, best.rows[0])
    pick.describe()     # "a searched schedule (heuristic (v)) holds up to 5.5 micro-batches where 8 fit: ..."

The cap is the room each pipeline rank's GPU has for activations (usable memory less its
parameters, gradients and optimizer state) over what one micro-batch's activations of the rank's
share weigh there; the costs are the busiest rank's forward, backward and weight-gradient time per
micro-batch and the message between neighbours, as the planner predicts them (uniform over ranks:
the search's cost model). The step is the row's, with its pipeline scaled by the searched
schedule's makespan over the kind's on those costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule.kinds import make_schedule
from ..schedule.search import Found, search
from ..sim.costs import Costs
from ..sim.pipeline import simulate
from .evaluate import predictor
from .prediction import Row
from .setup_and_layout import Layout, Setup

MAX_ACTIONS = 3 * 64  # p·m·3 above this the search takes more than seconds here: the planner says so


@dataclass(frozen=True)
class Searched:
    row: Row
    cap: tuple[float, ...]  # per pipeline rank: the micro-batches' activations its GPU has room for
    held: tuple[float, ...]  # per pipeline rank: what the row's own schedule holds there
    found: Found | None  # None: nothing searched (one stage, no room beyond the kind's, too large)
    kind_makespan: float  # the row's kind on the search's costs
    step: float  # the row's step with the searched schedule
    why: str  # when nothing was searched, why

    @property
    def better(self) -> bool:
        return self.found is not None and self.step < self.row.step * (1 - 1e-9)

    def describe(self) -> str:
        lay = self.row.layout
        if self.found is None:
            return f"no searched schedule for {lay.label()}: {self.why}"
        f = self.found
        verdict = (
            f"{1 - self.step / self.row.step:.1%} shorter step, {self.step:.2f} s instead of {self.row.step:.2f} s"
            if self.better
            else f"no shorter than {lay.schedule_label()} ({self.row.step:.2f} s)"
        )
        return (
            f"a searched schedule for {lay.label()} ({f.how}) holds {_few(f.peak)} micro-batches on its ranks, where "
            f"{_few(self.cap)} fit and {lay.schedule_label()} holds {_few(self.held)}: {verdict}"
        )


def _few(xs) -> str:
    return ", ".join(f"{x:.3g}" for x in xs)


def _room(setup: Setup, layout: Layout) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per pipeline rank: (micro-batches of activations its GPU has room for, what the layout's kind holds there)."""
    fp = predictor(setup).footprint
    one = Layout(
        layout.tp,
        layout.pp,
        layout.dp,
        layout.micro_batch,
        layout.m,
        "1f1b",
        1,
        layout.recompute,
        layout.zero,
        cp=layout.cp,
    )
    room, held = [], []
    for r in range(layout.pp):
        state = fp.of_rank(layout, r)
        fixed = state["parameters"] + state["gradients"] + state["optimizer"]
        zero = fp.activation(one, r, inflight=0)  # what a rank holds with none in flight
        each = fp.activation(one, r, inflight=1) - zero  # one micro-batch of the rank's share
        room.append(max(0.0, (setup.usable - fixed - zero) / each))
        held.append((state["activations"] - zero) / each)
    return tuple(room), tuple(held)


def searched_for(setup: Setup, row: Row, *, exact: bool | str = "auto") -> Searched:
    """The shortest schedule the search finds for `row`'s layout under its GPUs' room for activations."""
    lay = row.layout
    cap, held = _room(setup, lay)
    if lay.pp == 1:
        return Searched(row, cap, held, None, 0.0, row.step, "one pipeline stage: there is no schedule to choose")
    if all(c <= h * (1 + 1e-9) for c, h in zip(cap, held)):
        return Searched(
            row,
            cap,
            held,
            None,
            0.0,
            row.step,
            f"its memory holds {_few(cap)} micro-batches on its ranks, no more than "
            f"{lay.schedule_label()} keeps ({_few(held)})",
        )
    if 3 * lay.pp * lay.m > MAX_ACTIONS:
        return Searched(
            row,
            cap,
            held,
            None,
            0.0,
            row.step,
            f"pp·m = {lay.pp * lay.m} is more than the search takes in seconds here (pp·m ≤ "
            f"{MAX_ACTIONS // 3}); search it yourself with minipipe.schedule.search",
        )
    pred = predictor(setup)
    blk = pred.block(lay)
    blocks = max(pred.footprint.counts(lay.pp, 1))
    costs = Costs(
        forward=blk.forward * blocks,
        backward=blk.backward * blocks,
        weight=blk.weight * blocks,
        latency=pred.message(lay.tp, lay.cp, lay.dp, lay.micro_batch),
    )
    found = search(lay.pp, lay.m, costs, [max(c, 1.0) for c in cap], exact=exact)
    kind = simulate(make_schedule(lay.schedule, lay.pp, lay.m, lay.v), costs).makespan
    step = row.step - row.pipeline + row.pipeline * found.makespan / kind
    return Searched(row, cap, held, found, kind, min(step, row.step), "")
