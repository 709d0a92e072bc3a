"""The end of a training step: the gradient reduction over data parallelism, and the optimizer step.

dp          the gradient reduction over the dp·cp ranks holding the same parameters: ZeRO 0 an
            all-reduce, 1 a reduce-scatter and an all-gather of the parameters, 2 the
            all-gather (the reduce-scatters ran per micro-batch), 3 none at the step's end;
            overlapped bucket by bucket with each rank's last backward (dp_overlap; the last
            bucket always shows), the parameters' all-gather with the first forwards; a tied
            head's gradient summed between the first and the last pipeline rank
optimizer   compute.optimizer_time over the parameters this GPU updates

A mixture-of-experts model's routed experts are reduced over the dp·cp/ep ranks holding the same
experts (the edp group), the rest over dp·cp, one after the other on the dp link.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..sim.network import Link, ring
from .compute import optimizer_time
from .footprint import Footprint
from .setup_and_layout import Layout, Setup
from .shapes import VALUE_BYTES, count

BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket (bucket_cap_mb=25): the last one never overlaps


@dataclass(frozen=True, slots=True)
class RankReduction:
    """One pipeline rank's step end, seconds."""

    reduce: float  # the gradients' reduction (all-reduce or reduce-scatter), all of it
    gather: float  # the parameters' all-gather (ZeRO 1 and 2)
    tail: float  # the last bucket's reduction: what no backward hides
    optimizer: float  # the optimizer step over what this GPU updates


@dataclass(frozen=True)
class Reductions:
    """What every layout of one schedule, tp, cp, pp, dp, v and ZeRO stage reduces at its step's end."""

    per_rank: dict[int, RankReduction]  # pipeline rank -> its reduction
    tied: float  # a tied head's gradient summed between the ends of the pipeline
    longest: float  # the whole reduction on the rank that takes longest, the tied sum included
    optimizer: float  # the optimizer step on the rank that takes longest


@dataclass(slots=True)
class StepEnd:
    exposed: float  # what the step-end reduction adds to the step (the rest hides behind backwards)
    reduction: float  # the whole reduction (Reductions.longest)
    optimizer: float  # the optimizer step


def reductions(
    setup: Setup, footprint: Footprint, links: dict[str, Link], layout: Layout, ranks: Iterable[int]
) -> Reductions:
    """Each of `ranks`' reduction and optimizer step, on the dp and pp `links` (setup_and_layout.links)."""
    s, model, fp = setup, setup.model, footprint
    p, z, n = layout.pp, layout.zero, layout.replicas
    e, g = VALUE_BYTES[s.precision], s.grad_bytes
    net = links
    per: dict[int, RankReduction] = {}
    ne = n // layout.ep  # the edp ranks holding the same experts
    for r in ranks:
        elements = fp.elements(layout.schedule, layout.tp, p, layout.v, r, layout.ep)
        routed = fp.expert_share(layout.schedule, layout.tp, p, layout.v, r, layout.ep)
        updated = (elements - routed) / layout.zero_shards + routed / layout.expert_shards
        opt = optimizer_time(updated, s.precision, s.optimizer, g, s.achieved)
        # (bytes, ranks) of each reduction: the experts' gradients over edp, the rest over dp·cp
        groups = [(b, k) for b, k in (((elements - routed), n), (routed, ne)) if b > 0 and k > 1]
        if not groups:
            reduce = gather = tail = 0.0
        elif z == 0:
            reduce, gather = sum(ring("all-reduce", b * g, k, net["dp"]) for b, k in groups), 0.0
            tail = ring("all-reduce", min(elements * g, BUCKET_BYTES), n, net["dp"])
        elif z == 1:
            reduce = sum(ring("reduce-scatter", b * g, k, net["dp"]) for b, k in groups)
            gather = sum(ring("all-gather", b * e, k, net["dp"]) for b, k in groups)
            tail = ring("reduce-scatter", min(elements * g, BUCKET_BYTES), n, net["dp"])
        else:  # the reduce-scatters ran per micro-batch; stage 2 gathers the parameters
            reduce = tail = 0.0
            gather = sum(ring("all-gather", b * e, k, net["dp"]) for b, k in groups) if z == 2 else 0.0
        per[r] = RankReduction(reduce=reduce, gather=gather, tail=tail, optimizer=opt)
    tied = 0.0
    if model.tied_head and p > 1:  # the embedding's and the head's copies summed
        tied = ring(
            "all-reduce", count([(model.vocab * model.hidden, s.vocab_parallel)], layout.tp)[0] * g, 2, net["pp"]
        )
    return Reductions(
        per_rank=per,
        tied=tied,
        longest=max(0.0, *(red.reduce + red.gather for red in per.values())) + tied,
        optimizer=max(0.0, *(red.optimizer for red in per.values())),
    )


def step_end(
    reduced: Reductions,
    layout: Layout,
    *,
    overlap: bool,
    forward: dict[int, float],
    backward: dict[int, float],
    message: float,
) -> StepEnd:
    """What the step-end reduction exposes, given each rank's `forward` and `backward` per
    micro-batch (its share of the model) and a message between pipeline neighbours: with
    `overlap`, a rank's buckets run behind its cool-down and its last backward, its parameters'
    all-gather behind its first forwards."""
    p, v, m = layout.pp, layout.v, layout.m
    exposed = 0.0
    for r, red in reduced.per_rank.items():
        reduce, gather = red.reduce, red.gather
        if overlap:
            window = r * (backward[r] / v + message) + backward[r] / v  # the rank's cool-down and last backward
            shown = max(red.tail, reduce - window) + max(0.0, gather - min(m * v, p) * forward[r] / v)
        else:
            shown = reduce + gather
        exposed = max(exposed, shown)
    return StepEnd(exposed=exposed + reduced.tied, reduction=reduced.longest, optimizer=reduced.optimizer)
