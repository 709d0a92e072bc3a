"""When nothing fits: how far the closest layouts are (even those left out before predicting) and
what would fit — the smallest GPU count, or the nearest global batch, with which a layout fits."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from ..schedule import kinds
from .evaluate import evaluate
from .footprint import memory_per_rank
from .prediction import Row
from .setup_and_layout import Layout, Setup
from .space import Space, cuts, divisors, expert_parallel
from .timing import placement

T = TypeVar("T")


def near_misses(setup: Setup, space: Space) -> list[Row]:
    """Layouts for the cuts whose dp does not divide the batch, predicted with the batch rounded
    up to a multiple of dp (one sequence per micro-batch): how far they are from fitting."""
    out = []
    for tp in divisors(setup.gpus):
        if setup.model.heads % tp or setup.model.kv % tp or setup.model.inner % tp:
            continue
        for pp in divisors(setup.gpus // tp):
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
        sizes = [b for b in (space.micro_batches or divisors(share)) if share % b == 0]
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
            ep = max(expert_parallel(setup, space, dp * cp), default=1)  # the fewest experts a rank holds
            lay = Layout(tp, pp, dp, b, share // b, kind, v, rc, z, cp, ep)
            where = placement(kind, pp, v)
            ends = sorted({0, pp - 1, where[0], where[-1]})
            mem = memory_per_rank(
                setup.model,
                lay,
                setup.precision,
                setup.optimizer,
                ranks=ends,
                sequence_parallel=setup.sequence_parallel,
                vocab_parallel=setup.vocab_parallel,
                fp32_gradients=setup.fp32_gradients,
                experts=setup.experts,
            )
            if max(sum(x.values()) for x in mem) <= setup.usable:
                return True
    return False


def suggest(setup: Setup, space: Space, seconds: float = 2.0) -> list[str]:
    """What would fit when nothing does: the smallest GPU count (same batch; every count up to
    twice as many GPUs, then whole nodes up to 64 times as many), the nearest batch (same GPUs,
    within 256 sequences); each looked for for at most `seconds`."""
    out = []
    node = setup.node
    counts = list(range(setup.gpus + 1, 2 * setup.gpus + 1)) + list(
        range((2 * setup.gpus // node + 1) * node, 64 * setup.gpus + 1, node)
    )
    more = _first(counts, lambda n: fits_somehow(replace(setup, gpus=n), space), seconds)
    if more is not None:
        out.append(f"{more} GPUs (--gpus {more}) would fit a layout with the batch of {setup.batch} sequences")
    near = sorted(range(max(1, setup.batch - 256), setup.batch + 257), key=lambda x: (abs(x - setup.batch), x))
    batch = _first(
        [x for x in near if x != setup.batch], lambda x: fits_somehow(replace(setup, batch=x), space), seconds
    )
    if batch is not None:
        out.append(
            f"a global batch of {batch} sequences (--batch {batch}) would fit a layout on these {setup.gpus} GPUs"
        )
    if not out:
        out.append(
            f"no GPU count up to {64 * setup.gpus} (as far as {seconds:g} s of looking reached) and no batch "
            f"within 256 of {setup.batch} fits: a GPU with more memory, a smaller memory reserve, or a smaller "
            f"model"
        )
    return out


def _first(candidates: Iterable[T], fits: Callable[[T], bool], seconds: float) -> T | None:
    """The first candidate that fits, looked for for at most `seconds`."""
    end = time.perf_counter() + seconds
    for x in candidates:
        if fits(x):
            return x
        if time.perf_counter() > end:
            return None
    return None
