"""The search: every layout of a model on a cluster, predicted, the ones that fit ranked by step time.

    from minipipe.planner import plan
    best = plan("gpt3-175b", gpus=1024, gpu="a100-80gb")
    print(best.table())          # the ranking, the closest misses, the assumptions
    best.rows[0].layout          # Layout(tp=8, pp=..., dp=..., micro_batch=..., m=..., ...)

It enumerates every layout of `gpus` GPUs as tp × cp × pp × dp (tensor parallelism up to what the
model's widths allow, across nodes at its cost), every micro-batch size that divides the global
batch, every schedule kind the registry can time and size (minipipe/schedule/kinds.py: 1F1B,
interleaved with v chunks per rank, GPipe, ZB-H1, ... and any kind registered later with its
formulas), activation recomputation (minipipe/schedule/recompute.py) and ZeRO stages 0-3; predicts
each (evaluate.py), drops those that do not fit in a GPU's memory (and says why for the closest
misses) and ranks the rest by step time.

Memory never shrinks as the micro-batch grows, nor as recomputation or ZeRO do less, so once a
layout does not fit, the larger ones of its kind are left out without predicting them (counted).
The first `refine` ways to cut the GPUs whose schedule has no exact closed form (interleaved
chunks of unequal cost, kinds timed by their uniform-cost formula) are replayed by the simulator
and re-ranked. When nothing fits, `suggestions` says what would: the smallest GPU count, or the
nearest global batch, with which a layout fits.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field, replace
from typing import Sequence

from ..schedule import kinds
from ..schedule import recompute as recomputation
from .evaluate import NoFormula, Row, evaluate, exact, predictor
from .layout import ZERO, Layout, Setup, make_setup
from .memory import memory_per_rank
from .presets import GPU
from .shapes import ModelShape
from .timing import plannable

# Set while an exercise's checker runs the learner's code: the search answers with SearchRefused
# and notes that it was asked (see out_of_reach), so that the learner's choice is the learner's,
# however the search is reached and even if the learner's code swallows the error.
_REFUSED: contextvars.ContextVar["Refusal | None"] = contextvars.ContextVar("planner_search_refused", default=None)


class SearchRefused(RuntimeError):
    """The planner's search was asked while it is out of reach (an exercise's checker is running)."""


@dataclass
class Refusal:
    why: str
    asked: int = 0            # times plan() or layouts() were called while out of reach


@contextlib.contextmanager
def out_of_reach(why: str):
    """While inside, plan() and layouts() raise SearchRefused(why) instead of searching; the
    Refusal yielded counts how often they were asked."""
    refusal = Refusal(why)
    token = _REFUSED.set(refusal)
    try:
        yield refusal
    finally:
        _REFUSED.reset(token)


def refuse_if_out_of_reach() -> None:
    refusal = _REFUSED.get()
    if refusal is not None:
        refusal.asked += 1
        raise SearchRefused(refusal.why)


@dataclass(frozen=True)
class Space:
    """What the search tries. schedules: kinds (None: every kind the registry can time and size);
    recompute, zero: the options; micro_batches: sizes (None: every divisor of each replica's
    share of the batch); max_tp, max_pp: upper bounds (None: what the model allows); cp: context-
    parallel degrees (None: 1, and more where each rank keeps at least MIN_CP_TOKENS positions);
    max_v: chunks per rank for kinds that interleave."""

    schedules: tuple | None = None
    recompute: tuple = recomputation.NAMES
    zero: tuple = ZERO
    micro_batches: tuple | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    cp: tuple | None = None
    max_v: int = 8

    def kinds(self) -> list[str]:
        names = self.schedules if self.schedules is not None else [k for k in kinds.names() if plannable(k)]
        out = []
        for name in names:
            kind = kinds.get(name)
            if not plannable(kind.name):
                raise ValueError(f"the planner can time and size the kinds with makespan and peak_inflight formulas "
                                 f"({', '.join(k for k in kinds.names() if plannable(k))}); {name!r} has none")
            out.append(kind.name)
        return out

    def checked(self) -> "Space":
        self.kinds()
        for rc in self.recompute:
            recomputation.get(rc)
        for z in self.zero:
            if z not in ZERO:
                raise ValueError(f"zero stages are {', '.join(map(str, ZERO))}; got {z!r}")
        for name, values in (("micro_batches", self.micro_batches), ("cp", self.cp)):
            for x in values or ():
                if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                    raise ValueError(f"{name} must be whole numbers >= 1, got {x!r}")
        for name in ("max_tp", "max_pp", "max_v"):
            x = getattr(self, name)
            if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {x!r}")
        return self


MIN_CP_TOKENS = 2048      # context parallelism is searched only where each rank keeps this many positions


def cuts(setup: Setup, space: Space, skip) -> list[tuple[int, int, int, int]]:
    """Every (tp, cp, pp, dp) the search tries; what is left out is counted by skip(reason, n)."""
    model, n = setup.model, setup.gpus
    out = []
    for tp in _divisors(n):
        if space.max_tp is not None and tp > space.max_tp:
            continue
        if model.heads % tp or model.kv % tp or model.inner % tp:
            skip(f"tp must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP width "
                 f"({model.inner})")
            continue
        cps = space.cp if space.cp is not None else \
            [c for c in _divisors(n // tp) if c == 1 or (model.seq % (2 * c) == 0 and model.seq // c >= MIN_CP_TOKENS)]
        for cp in cps:
            if (n // tp) % cp:
                continue
            for pp in _divisors(n // (tp * cp)):
                if pp > model.layers or (space.max_pp is not None and pp > space.max_pp):
                    skip(f"pp at most the model's {model.layers} layers" if pp > model.layers else "pp above max_pp")
                    continue
                dp = n // (tp * cp * pp)
                if setup.batch % dp:
                    skip(f"dp must divide the global batch of {setup.batch} sequences")
                    continue
                out.append((tp, cp, pp, dp))
    return out


def layouts(setup: Setup, space: Space = Space(), skipped: dict | None = None) -> list[Layout]:
    """Every layout the search would try, before memory rules any out (`skipped` counts what is
    left out and why)."""
    refuse_if_out_of_reach()
    skipped = {} if skipped is None else skipped
    out = []
    for tp, cp, pp, dp in cuts(setup, space.checked(), lambda why, n=1: _count(skipped, why, n)):
        for group in _groups(setup, space, tp, cp, pp, dp, skipped):
            out.extend(group)
    return out


def _count(skipped: dict, why: str, n: int = 1) -> None:
    skipped[why] = skipped.get(why, 0) + n


def _groups(setup: Setup, space: Space, tp: int, cp: int, pp: int, dp: int, skipped: dict):
    """For one cut: per (kind, v, recompute, zero), its layouts by growing micro-batch."""
    model = setup.model
    share = setup.batch // dp
    sizes = [b for b in (space.micro_batches or _divisors(share)) if share % b == 0]
    recompute = [rc for rc in recomputation.NAMES if rc in space.recompute
                 and not (rc == "selective" and model.attention == "fused")]   # flash keeps no s² scores
    zeros = list(space.zero) if dp * cp > 1 else [min(space.zero)]   # one copy of the state: every stage is alike
    for kind in space.kinds():
        for v in _vs(kind, pp, model.layers, space.max_v):
            for rc in recompute:
                for z in zeros:
                    group = []
                    for b in sizes:
                        m = share // b
                        try:
                            kinds.check(kind, pp, m, v)
                        except ValueError as e:      # e.g. interleaving needs m a multiple of pp
                            _count(skipped, f"{kind}: " + str(e).split(": ", 1)[-1].split(",")[0])
                            continue
                        group.append(Layout(tp, pp, dp, b, m, kind, v, rc, z, cp))
                    yield group


def _vs(kind: str, pp: int, layers: int, max_v: int) -> range:
    k = kinds.get(kind)
    if not k.takes_v:
        return range(1, 2)
    if pp == 1:
        return range(0)                   # one rank: nothing to interleave
    return range(k.min_v, min(max_v, layers // pp) + 1)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Layouts:
    """The ranking: `rows` fit, fastest first; `misses` do not fit, closest first; `skipped`
    counts layouts left out before predicting, by reason; `suggestions`, when nothing fits, what
    would; `predicted` how many layouts were predicted."""

    setup: Setup
    rows: list[Row]
    misses: list[Row]
    skipped: dict = field(default_factory=dict)
    suggestions: list[str] = field(default_factory=list)
    predicted: int = 0
    space: Space = Space()

    @property
    def considered(self) -> int:
        """Layouts predicted, and those left out before predicting for memory (a smaller one missed)."""
        return self.predicted + sum(n for why, n in self.skipped.items() if why.startswith(MEMORY_SKIP))

    def best(self, **where) -> Row | None:
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

    def rank_of(self, **where) -> int | None:
        """1-based place of the fastest row with these layout fields among distinct cuts."""
        return next((i for i, r in enumerate(self.distinct(), 1)
                     if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def place(self, row: Row) -> tuple[int, int]:
        """(place among every fitting row, place among the distinct cuts) a row would take."""
        ahead = sum(1 for r in self.rows if rank_key(r) < rank_key(row) and r.layout != row.layout)
        cuts_ahead = sum(1 for r in self.distinct() if rank_key(r) < rank_key(row)
                         and (r.layout.tp, r.layout.cp, r.layout.pp, r.layout.dp)
                         != (row.layout.tp, row.layout.cp, row.layout.pp, row.layout.dp))
        return ahead + 1, cuts_ahead + 1

    def table(self, top: int = 10, misses: int = 3, every: bool = False) -> str:
        """The ranking as text (report.table): the best `top` cuts of the GPUs, each with its
        fastest choice of micro-batch, schedule, recomputation and ZeRO stage (`every`: every
        row), the closest misses, what would fit when nothing does, and the assumptions."""
        from .report import table

        return table(self, top=top, misses=misses, every=every)


MEMORY_SKIP = "needs more memory than a smaller one that missed"


def search(setup: Setup, space: Space = Space(), *, refine: int = 10, misses: int = 20) -> Layouts:
    """Predict every layout of `setup` that `space` allows and rank them (see the module docstring)."""
    refuse_if_out_of_reach()
    space = space.checked()
    skipped: dict = {}
    rows, missed, predicted = [], [], 0
    predict = predictor(setup).predict
    for tp, cp, pp, dp in cuts(setup, space, lambda why, n=1: _count(skipped, why, n)):
        for group in _groups(setup, space, tp, cp, pp, dp, skipped):
            for i, lay in enumerate(group):
                try:
                    row = predict(lay, fallback=False)
                except NoFormula as e:
                    _count(skipped, f"{lay.schedule}: its formula does not hold here ({str(e).split(';')[0]})")
                    continue
                predicted += 1
                if row.fits:
                    rows.append(row)
                    continue
                missed.append(row)
                if len(group) - i - 1:
                    _count(skipped, MEMORY_SKIP, len(group) - i - 1)
                break
    rows.sort(key=rank_key)
    missed.sort(key=miss_key)
    result = Layouts(setup, rows, missed[:misses], skipped, predicted=predicted, space=space)
    if refine:
        _refine(result, refine)
    if not rows:
        result.misses = (result.misses + near_misses(setup, space))
        result.misses.sort(key=miss_key)
        result.misses = result.misses[:misses]
        result.suggestions = suggest(setup, space)
    return result


def _refine(result: Layouts, n: int) -> None:
    """Replay the first n cuts' fastest rows whose closed form is only close, and re-rank, until
    the first n are all exact or replayed (a replayed row is slower, so others move up)."""
    budget = 25 * n                    # replays at most (each a few milliseconds to a second)
    while budget > 0:
        pending = [r for r in result.distinct()[:n] if r.timed == "closed form (close)"]
        if not pending:
            return
        for row in pending:
            result.rows[result.rows.index(row)] = evaluate(result.setup, row.layout, simulate=True)
        budget -= len(pending)
        result.rows.sort(key=rank_key)


def near_misses(setup: Setup, space: Space) -> list[Row]:
    """Layouts for the cuts whose dp does not divide the batch, predicted with the batch rounded
    up to a multiple of dp (one sequence per micro-batch): how far they are from fitting."""
    out = []
    for tp in _divisors(setup.gpus):
        if setup.model.heads % tp or setup.model.kv % tp or setup.model.inner % tp:
            continue
        for pp in _divisors(setup.gpus // tp):
            dp = setup.gpus // (tp * pp)
            if pp > setup.model.layers or setup.batch % dp == 0:
                continue
            m = -(-setup.batch // dp)
            near = replace(setup, batch=dp * m)
            row = evaluate(near, Layout(tp, pp, dp, 1, m, "1f1b", 1, "full", 3 if dp > 1 else 0))
            row.note = f"with the batch rounded up to {dp * m}, a multiple of dp={dp}"
            out.append(row)
    return out


def fits_somehow(setup: Setup, space: Space) -> bool:
    """Whether any layout of the setup fits, memory only: each cut at its most frugal (the
    smallest micro-batch, the thriftiest schedule, full recomputation, ZeRO 3 where allowed)."""
    kinds_ = space.kinds()
    rc = "full" if "full" in space.recompute else space.recompute[-1]
    for tp, cp, pp, dp in cuts(setup, space, lambda *a: None):
        share = setup.batch // dp
        sizes = [b for b in (space.micro_batches or _divisors(share)) if share % b == 0]
        if not sizes:
            continue
        b = sizes[0]
        z = max(space.zero) if dp * cp > 1 else 0
        for kind in kinds_:
            k = kinds.get(kind)
            v = k.min_v if k.takes_v else 1
            if k.takes_v and pp == 1:
                continue
            try:
                kinds.check(kind, pp, share // b, v)
            except ValueError:
                continue
            lay = Layout(tp, pp, dp, b, share // b, kind, v, rc, z, cp)
            ends = sorted({0, pp - 1})
            mem = memory_per_rank(setup.model, lay, setup.precision, setup.optimizer, ranks=ends,
                                  sequence_parallel=setup.sequence_parallel, vocab_parallel=setup.vocab_parallel,
                                  fp32_gradients=setup.fp32_gradients)
            if max(sum(x.values()) for x in mem) <= setup.usable:
                return True
    return False


def suggest(setup: Setup, space: Space, limit: int = 4096) -> list[str]:
    """What would fit when nothing does: the smallest GPU count (same batch), the nearest batch
    (same GPUs)."""
    out = []
    more = next((n for n in range(setup.gpus + 1, setup.gpus + limit) if fits_somehow(replace(setup, gpus=n), space)),
                None)
    if more is not None:
        out.append(f"{more} GPUs (--gpus {more}) would fit a layout with the batch of {setup.batch} sequences")
    near = sorted(range(max(1, setup.batch - 256), setup.batch + 257), key=lambda x: (abs(x - setup.batch), x))
    batch = next((x for x in near if x != setup.batch and fits_somehow(replace(setup, batch=x), space)), None)
    if batch is not None:
        out.append(f"a global batch of {batch} sequences (--batch {batch}) would fit a layout on these {setup.gpus} GPUs")
    if not out:
        out.append(f"no GPU count up to {setup.gpus + limit - 1} and no batch within 256 of {setup.batch} fits: a GPU "
                   f"with more memory, or a smaller model")
    return out


def plan(model: str | ModelShape = "gpt3-175b", gpus: int = 1024, gpu: str | GPU = "a100-80gb", *,
         batch: int | None = None, schedules=None, recompute=recomputation.NAMES, zero=ZERO, micro_batches=None,
         max_tp: int | None = None, max_pp: int | None = None, cp=None, max_v: int = 8, refine: int = 10,
         **settings) -> Layouts:
    """Rank every layout of `model` on `gpus` GPUs of kind `gpu` (see the module docstring).
    `batch`: global batch in sequences (default: the model preset's published one); settings:
    the Setup's (precision, optimizer, efficiency, gpus_per_node, sequence_parallel, dp_overlap,
    tp_overlap, vocab_parallel, fp32_gradients, memory_reserve, latency); the rest: Space's."""
    refuse_if_out_of_reach()
    setup = make_setup(model, gpus, gpu, batch=batch, **settings)
    space = Space(tuple(schedules) if schedules is not None else None, tuple(recompute), tuple(zero),
                  tuple(micro_batches) if micro_batches is not None else None, max_tp, max_pp,
                  tuple(cp) if cp is not None else None, max_v)
    return search(setup, space, refine=refine)


def rank_key(row: Row) -> tuple:
    """Fastest first; equal times (to a nanosecond) by the layout's own order, so the ranking
    does not depend on the order layouts were tried in."""
    return (round(row.step, 9), row.layout.key())


def miss_key(row: Row) -> tuple:
    """Closest to fitting first."""
    return (round(row.total_memory / row.usable, 12), row.layout.key())
