"""The search: every layout of a model on a cluster, predicted, the ones that fit ranked by step time.

    from minipipe.planner import plan
    best = plan("gpt3-175b", gpus=1024, gpu="a100-80gb")
    print(best.table())          # the ranking, the closest misses, the assumptions
    best.rows[0].layout          # Layout(tp=8, pp=..., dp=..., micro_batch=..., m=..., ...)

It enumerates every layout of `gpus` GPUs as tp × cp × pp × dp (tensor parallelism up to what the
model's widths allow, across nodes at its cost), every micro-batch size that divides the global
batch, every schedule kind the registry can time and size (minipipe/schedule/kinds.py: 1F1B,
interleaved with v chunks per rank, GPipe, ZB-H1, ... and any kind registered later with its
formulas), activation recomputation (minipipe/sim/recompute_costs.py) and ZeRO stages 0-3; predicts
each (evaluate.py), drops those that do not fit in a GPU's memory (and says why for the closest
misses) and ranks the rest by step time.

Memory never shrinks as the micro-batch grows, nor as recomputation or ZeRO do less, so once a
layout does not fit, the larger ones of its kind are left out without predicting them (counted).
A layout's memory is predicted first, as it is cheaper: its step time only when it fits, and for
the closest misses, the ones the answer shows.
The first `refine` ways to cut the GPUs whose schedule has no exact closed form (interleaved
chunks of unequal cost, kinds timed by their uniform-cost formula) are replayed by the simulator
and re-ranked. When nothing fits, `suggestions` says what would: the smallest GPU count, or the
nearest global batch, with which a layout fits.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..sim import recompute_costs as recomputation
from .advice import near_misses, suggest
from .evaluate import MemoryNeed, NoFormula, Predictor, evaluate, predictor
from .prediction import Row
from .presets import GPU
from .setup_and_layout import ZERO, Layout, Setup, make_setup
from .shapes import ModelShape
from .space import Space, check_experts, count, cuts, groups


def layouts(setup: Setup, space: Space = Space(), skipped: dict[str, int] | None = None) -> list[Layout]:
    """Every layout the search would try, before memory rules any out (`skipped` counts what is
    left out and why)."""
    skipped = {} if skipped is None else skipped
    out: list[Layout] = []
    for tp, cp, pp, dp in cuts(setup, space.checked(), lambda why: count(skipped, why)):
        for group in groups(setup, space, tp, cp, pp, dp):
            out.extend(group)
    return out


@dataclass
class Layouts:
    """The ranking: `rows` fit, fastest first; `misses` do not fit, closest first; `skipped`
    counts layouts left out before predicting, by reason; `suggestions`, when nothing fits, what
    would; `predicted` how many layouts were predicted."""

    setup: Setup
    rows: list[Row]
    misses: list[Row]
    skipped: dict[str, int] = field(default_factory=dict)
    suggestions: list[str] = field(default_factory=list)
    predicted: int = 0
    space: Space = Space()

    @property
    def considered(self) -> int:
        """Layouts predicted, and those left out before predicting for memory (a smaller one missed)."""
        return self.predicted + sum(n for why, n in self.skipped.items() if why.startswith(MEMORY_SKIP))

    def best(self, **where: object) -> Row | None:
        """The fastest row whose layout has these fields, e.g. best(tp=8, pp=8)."""
        return next((r for r in self.rows if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def distinct(self) -> list[Row]:
        """The fastest row of each (tp, cp, pp, dp), fastest first: one line per way to cut the GPUs."""
        seen, out = set(), []
        for r in self.rows:
            key = (r.layout.tp, r.layout.cp, r.layout.pp, r.layout.dp)
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def rank_of(self, **where: object) -> int | None:
        """1-based place of the fastest row with these layout fields among distinct cuts."""
        return next(
            (i for i, r in enumerate(self.distinct(), 1) if all(getattr(r.layout, k) == v for k, v in where.items())),
            None,
        )

    def place(self, row: Row) -> tuple[int, int]:
        """(place among every fitting row, place among the distinct cuts) a row would take."""
        ahead = sum(1 for r in self.rows if rank_key(r) < rank_key(row) and r.layout != row.layout)
        cuts_ahead = sum(
            1
            for r in self.distinct()
            if rank_key(r) < rank_key(row)
            and (r.layout.tp, r.layout.cp, r.layout.pp, r.layout.dp)
            != (row.layout.tp, row.layout.cp, row.layout.pp, row.layout.dp)
        )
        return ahead + 1, cuts_ahead + 1

    def table(self, top: int = 10, misses: int = 3, every: bool = False) -> str:
        """The ranking as text (report.table): the best `top` cuts of the GPUs, each with its
        fastest choice of micro-batch, schedule, recomputation and ZeRO stage (`every`: every
        row), the closest misses, what would fit when nothing does, and the assumptions."""
        from .report import table

        return table(self, top=top, misses=misses, every=every)


MEMORY_SKIP = "needs more memory than a smaller one that missed"
REFINE = 10  # ways to cut the GPUs whose fastest rows are replayed where the closed form is only close


def search(setup: Setup, space: Space = Space(), *, refine: int = REFINE, misses: int = 20) -> Layouts:
    """Predict every layout of `setup` that `space` allows and rank them (see the module docstring)."""
    space = space.checked()
    check_experts(setup, space)
    with collector_paused():
        return _search(setup, space, refine, misses)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The search makes some 10⁵ small objects and no reference cycles: Python's cyclic garbage
    collector, left on, walks them over and over (a tenth of a search's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _search(setup: Setup, space: Space, refine: int, misses: int) -> Layouts:
    skipped: dict[str, int] = {}
    rows: list[Row] = []
    missed: list[tuple[float, tuple[int | str, ...], Layout, MemoryNeed]] = []
    predicted = 0
    predictor_ = predictor(setup)
    usable = setup.usable
    for tp, cp, pp, dp in cuts(setup, space, lambda why: count(skipped, why)):
        for group in groups(setup, space, tp, cp, pp, dp):
            for i, lay in enumerate(group):
                memory = predictor_.memory(lay)  # first, as it is cheaper than the time
                total = memory.total
                if total > usable:  # a miss: the larger ones of its group miss too
                    predicted += 1
                    missed.append((round(total / usable, 12), lay.key(), lay, memory))
                    if len(group) - i - 1:
                        count(skipped, MEMORY_SKIP, len(group) - i - 1)
                    break
                try:
                    rows.append(predictor_.predict(lay, fallback=False, memory=memory))
                except NoFormula as e:
                    count(skipped, formula_skip(lay, e))
                    continue
                predicted += 1
    rows.sort(key=rank_key)
    result = Layouts(
        setup, rows, closest(predictor_, missed, misses, skipped), skipped, predicted=predicted, space=space
    )
    if refine:
        _refine(result, refine)
    if not rows:
        result.misses = result.misses + near_misses(setup, space)
        result.misses.sort(key=miss_key)
        result.misses = result.misses[:misses]
        result.suggestions = suggest(setup, space)
    return result


def formula_skip(layout: Layout, e: NoFormula) -> str:
    return f"{layout.schedule}: its formula does not hold here ({str(e).split(';')[0]})"


def closest(
    predictor_: Predictor,
    missed: list[tuple[float, tuple[int | str, ...], Layout, MemoryNeed]],
    n: int,
    skipped: dict[str, int],
) -> list[Row]:
    """The Rows of the n misses closest to fitting (`missed`: their miss_key, layout and memory),
    closest first; a miss whose kind has no closed form there is left out of the list (counted)."""
    out: list[Row] = []
    for *_, lay, memory in sorted(missed, key=lambda miss: miss[:2]):
        if len(out) == n:
            break
        try:
            out.append(predictor_.predict(lay, fallback=False, memory=memory))
        except NoFormula as e:
            count(skipped, formula_skip(lay, e))
    return out


def _refine(result: Layouts, n: int) -> None:
    """Replay the first n cuts' fastest rows whose closed form is only close, and re-rank, until
    the first n are all exact or replayed (a replayed row is slower, so others move up)."""
    budget = 25 * n  # replays at most (each a few milliseconds to a second)
    while budget > 0:
        pending = [r for r in result.distinct()[:n] if r.timed == "closed form (close)"]
        if not pending:
            return
        for row in pending:
            result.rows[result.rows.index(row)] = evaluate(result.setup, row.layout, simulate=True)
        budget -= len(pending)
        result.rows.sort(key=rank_key)


def plan(
    model: str | ModelShape = "gpt3-175b",
    gpus: int = 1024,
    gpu: str | GPU = "a100-80gb",
    *,
    batch: int | None = None,
    schedules: Iterable[str] | None = None,
    recompute: Iterable[str] = recomputation.BLOCK_NAMES,
    zero: Iterable[int] = ZERO,
    micro_batches: Iterable[int] | None = None,
    max_tp: int | None = None,
    max_pp: int | None = None,
    cp: Iterable[int] | None = None,
    max_v: int = 8,
    ep: Iterable[int] | None = None,
    refine: int = REFINE,
    **settings: Any,
) -> Layouts:
    """Rank every layout of `model` on `gpus` GPUs of kind `gpu` (see the module docstring).
    `batch`: global batch in sequences (default: the model preset's published one); settings:
    the Setup's (precision, optimizer, efficiency, gpus_per_node, sequence_parallel, dp_overlap,
    tp_overlap, vocab_parallel, fp32_gradients, memory_reserve, latency); the rest: Space's."""
    setup = make_setup(model, gpus, gpu, batch=batch, **settings)
    space = Space(
        tuple(schedules) if schedules is not None else None,
        tuple(recompute),
        tuple(zero),
        tuple(micro_batches) if micro_batches is not None else None,
        max_tp,
        max_pp,
        tuple(cp) if cp is not None else None,
        max_v,
        tuple(ep) if ep is not None else None,
    )
    return search(setup, space, refine=refine)


def rank_key(row: Row) -> tuple[float, tuple[int | str, ...]]:
    """Fastest first; equal times (to a nanosecond) by the layout's own order, so the ranking
    does not depend on the order layouts were tried in."""
    return (round(row.step, 9), row.layout.key())


def miss_key(row: Row) -> tuple[float, tuple[int | str, ...]]:
    """Closest to fitting first."""
    return (round(row.total_memory / row.usable, 12), row.layout.key())
