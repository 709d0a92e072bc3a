"""The search: every layout of a model on a cluster, predicted, the ones that fit ranked by step time.

    from minipipe.planner import plan
    best = plan("gpt3-175b", gpus=1024, gpu="a100-80gb")
    print(best.table())          # the ranking, the closest misses, the assumptions
    best.rows[0].layout          # Layout(tp=8, pp=..., dp=..., micro_batch=..., m=..., ...)

It enumerates every layout of `gpus` GPUs as tp × pp × dp (tp within a node), every micro-batch
size that divides the global batch, the schedules 1F1B and interleaved 1F1B (v chunks per rank)
and activation recomputation (none, selective, full); predicts each (evaluate.py), drops those that
do not fit in a GPU's memory (and says why for the closest misses) and ranks the rest by step time.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Sequence

from ..schedule import kinds
from ..schedule import recompute as recomputation
from .evaluate import Row, evaluate
from .layout import SCHEDULES, Layout, Setup, make_setup
from .presets import GPU
from .shapes import ModelShape

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


def layouts(setup: Setup, *, schedules: Sequence[str] = SCHEDULES, recompute: Sequence[str] = recomputation.NAMES,
            micro_batches: Sequence[int] | None = None, max_tp: int | None = None, max_v: int = 8,
            skipped: dict | None = None) -> list[Layout]:
    """Every layout worth predicting; what is left out and why is counted in `skipped`."""
    refuse_if_out_of_reach()
    model, n = setup.model, setup.gpus
    skipped = {} if skipped is None else skipped

    def skip(reason):
        skipped[reason] = skipped.get(reason, 0) + 1

    out = []
    max_tp = max_tp or setup.node
    tps = [t for t in _divisors(n) if t <= max_tp and setup.node % t == 0]   # a tp group stays inside a node
    for tp in tps:
        if model.heads % tp or model.kv % tp or model.inner % tp:
            skip(f"tp must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP width "
                 f"({model.inner})")
            continue
        for pp in _divisors(n // tp):
            if pp > model.layers:
                skip(f"pp at most the model's {model.layers} layers")
                continue
            dp = n // (tp * pp)
            if setup.batch % dp:
                skip(f"dp must divide the global batch of {setup.batch} sequences")
                continue
            for b in micro_batches or _divisors(setup.batch // dp):
                if (setup.batch // dp) % b:
                    continue
                m = setup.batch // (dp * b)
                for kind in schedules:
                    for v in _vs(kind, pp, model.layers, max_v):
                        try:
                            kinds.check(kind, pp, m, v)
                        except ValueError:
                            skip(f"{kind} needs m a multiple of pp")
                            continue
                        for rc in recompute:
                            if rc == "selective" and model.attention == "fused":
                                continue     # flash attention keeps no s² scores: selective is "none"
                            out.append(Layout(tp, pp, dp, b, m, kind, v, rc))
    return out


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
    counts layouts left out before predicting, by reason."""

    setup: Setup
    rows: list[Row]
    misses: list[Row]
    skipped: dict = field(default_factory=dict)

    def best(self, **where) -> Row | None:
        """The fastest row whose layout has these fields, e.g. best(tp=8, pp=8)."""
        return next((r for r in self.rows if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def distinct(self) -> list[Row]:
        """The fastest row of each (tp, pp, dp), fastest first: one line per way to cut the GPUs."""
        seen, out = set(), []
        for r in self.rows:
            key = (r.layout.tp, r.layout.pp, r.layout.dp)
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def rank_of(self, **where) -> int | None:
        """1-based place of the fastest row with these layout fields among distinct (tp, pp, dp)."""
        return next((i for i, r in enumerate(self.distinct(), 1)
                     if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def table(self, top: int = 10, misses: int = 3, every: bool = False) -> str:
        """The ranking as text (report.table): the best `top` (tp, pp, dp) layouts, each with its
        fastest choice of micro-batch, schedule and recomputation (`every`: every row), the
        closest misses and the assumptions."""
        from .report import table

        return table(self, top=top, misses=misses, every=every)


def plan(model: str | ModelShape = "gpt3-175b", gpus: int = 1024, gpu: str | GPU = "a100-80gb", *,
         batch: int | None = None, precision: str = "bf16-mixed", optimizer: str = "adam",
         efficiency: float | None = None, gpus_per_node: int | None = None, sequence_parallel: bool = True,
         distributed_optimizer: bool = False, dp_overlap: bool = True, vocab_parallel: bool = True,
         latency: float = 0.0, schedules: Sequence[str] = SCHEDULES, recompute: Sequence[str] = recomputation.NAMES,
         micro_batches: Sequence[int] | None = None, max_tp: int | None = None, max_v: int = 8) -> Layouts:
    """Rank every layout of `model` on `gpus` GPUs of kind `gpu` (see the module docstring).
    `batch`: global batch in sequences (default: the model preset's published one)."""
    setup = make_setup(model, gpus, gpu, batch=batch, precision=precision, optimizer=optimizer, efficiency=efficiency,
                       gpus_per_node=gpus_per_node, sequence_parallel=sequence_parallel,
                       distributed_optimizer=distributed_optimizer, dp_overlap=dp_overlap,
                       vocab_parallel=vocab_parallel, latency=latency)
    for kind in schedules:
        if kind not in SCHEDULES:
            raise ValueError(f"the planner knows the schedules {', '.join(SCHEDULES)}; got {kind!r}")
    for rc in recompute:
        recomputation.get(rc)
    skipped: dict = {}
    rows = [evaluate(setup, lay) for lay in layouts(setup, schedules=schedules, recompute=recompute,
                                                     micro_batches=micro_batches, max_tp=max_tp, max_v=max_v,
                                                     skipped=skipped)]
    fits = sorted((r for r in rows if r.fits), key=rank_key)
    misses = sorted((r for r in rows if not r.fits), key=miss_key)
    return Layouts(setup, fits, misses, skipped)


def rank_key(row: Row) -> tuple:
    """Fastest first; equal times (to a nanosecond) by the layout's own order, so the ranking
    does not depend on the order layouts were tried in."""
    return (round(row.step, 9), row.layout.key())


def miss_key(row: Row) -> tuple:
    """Closest to fitting first."""
    return (round(row.total_memory / row.capacity, 12), row.layout.key())
