"""What each GPU of a layout holds, by kind: the planner's memory model.

parameters, gradients, optimizer: the rank's parameter elements (its blocks, the embedding on the
first pipeline rank, the final norm and head on the last) × shapes.bytes_per_parameter (gradients:
4 bytes with fp32 gradients), Adam's 4-byte step count per parameter tensor (torch keeps one), and
ZeRO's sharding over the n = dp·cp ranks that hold the same parameters (Rajbhandari et al. 2020):
stage 1 divides the optimizer state by n, stage 2 the gradients too, stage 3 (FSDP) the parameters
too — which then gathers two blocks' parameters at a time (the one computing and the one
prefetched) and holds one block's full gradients before their reduce-scatter.

Which stages a rank owns is the schedule's own placement (timing.placement: round robin for
most kinds, a V for the V-shaped ones, which put the first stage and the last on rank 0).

activations: the most micro-batch chunks the schedule has the rank hold at once (the kind's
peak_inflight) × its largest chunk's blocks × what a block keeps under the layout's recomputation,
plus the embedding's and the head's own (per micro-batch in flight), plus what recomputing one
block brings back for the span of its backward (minipipe/sim/recompute_costs.py).

experts (a mixture-of-experts model, Setup.experts): the model is its dense equivalent, each MLP
as wide as the experts one token runs through (setup_and_layout.dense_equivalent), so its
activations are one token's path. Each MoE block on the rank then holds, beyond that, its router
(experts × hidden, whole on every tp rank) and experts/ep routed experts (each split over tp, as
Megatron-Core's expert tensor parallelism = tp) instead of the top_k the dense equivalent has;
ZeRO shards the experts' state over the dp·cp/ep ranks holding the same experts (Layout.
expert_shards), the rest over dp·cp. With a capacity factor, each expert's inputs and inner
activations are padded to its capacity: capacity_factor × what one token's path keeps of them.
The router's scores (fp32, tokens × experts) are kept for its backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..schedule import kinds
from ..sim import recompute_costs as recomputation
from .experts import mlp_parameters
from .moe_shape import Experts
from .setup_and_layout import Layout
from .shapes import (
    VALUE_BYTES,
    ModelShape,
    bytes_per_parameter,
    count,
    embedding_activation_bytes,
    embedding_tensors,
    head_activation_bytes,
    head_tensors,
    layer_activation_parts,
    layer_tensors,
    stage_layers,
)
from .timing import placement


# Named tuples: each field by name, and the whole unpacked in one line where a caller wants all of it.
class Structure(NamedTuple):
    first: int  # the rank holding the first stage (the embedding)
    last: int  # the rank holding the last (the head)
    ranks: tuple[int, ...]  # those two, the first, the second and the last: the ranks that tell pace and memory
    blocks: dict[int, int]  # rank -> its blocks, for those ranks


class Count(NamedTuple):
    elements: int  # on one tp rank
    tensors: int


class Parameters(NamedTuple):
    block: Count
    embedding: Count
    head: Count


class Activations(NamedTuple):
    kept: float  # a block's bytes kept from its forward to its backward, one micro-batch
    transient: float  # what recomputing one block brings back for the span of its backward
    embedding: float  # the embedding's kept bytes, one micro-batch
    head: float  # the head's


class ModelState(NamedTuple):
    parameters: float  # bytes
    gradients: float
    optimizer: float


class Footprint:
    """The memory model of one model and its training settings, with what many layouts share
    worked out once (the search asks it thousands of times)."""

    def __init__(
        self,
        model: ModelShape,
        precision: str = "bf16-mixed",
        optimizer: str = "adam",
        *,
        sequence_parallel: bool = True,
        vocab_parallel: bool = True,
        fp32_gradients: bool = False,
        experts: Experts | None = None,
    ):
        self.model, self.precision, self.optimizer, self.experts = model, precision, optimizer, experts
        self.sequence_parallel, self.vocab_parallel = sequence_parallel, vocab_parallel
        self.per = bytes_per_parameter(precision, optimizer)
        self.grad = 4 if fp32_gradients else self.per.gradients
        self.value = VALUE_BYTES[precision]
        self._counts: dict[tuple[int, int], list[int]] = {}
        self._stage_elements: dict[tuple[int, int, int], list[int]] = {}
        self._stages: dict[tuple[str, int, int, int], list[int]] = {}
        self._structures: dict[tuple[str, int, int], Structure] = {}
        self._acts: dict[tuple[int, int, int, str], Activations] = {}
        self._params: dict[tuple[int, bool], Parameters] = {}
        self._state: dict[tuple[str, int, int, int, int, int, int, int, int], ModelState] = {}
        self._moe_blocks: dict[tuple[str, int, int, int], int] = {}

    def counts(self, p: int, v: int) -> list[int]:
        key = (p, v)
        if key not in self._counts:
            self._counts[key] = stage_layers(self.model.layers, p * v)
        return self._counts[key]

    def stages_of(self, kind: str, p: int, v: int, r: int) -> list[int]:
        """The block counts of the stages pipeline rank r owns under `kind` (timing.placement)."""
        key = (kind, p, v, r)
        if key not in self._stages:
            counts, where = self.counts(p, v), placement(kind, p, v)
            self._stages[key] = [n for n, owner in zip(counts, where) if owner == r]
        return self._stages[key]

    def ends(self, kind: str, p: int, v: int) -> tuple[int, int]:
        """The ranks holding the first stage (the embedding) and the last (the head)."""
        where = placement(kind, p, v)
        return where[0], where[-1]

    def structure(self, kind: str, p: int, v: int) -> Structure:
        """The ranks that tell the pipeline's pace and memory, and the blocks on each of them."""
        key = (kind, p, v)
        if key not in self._structures:
            first, last = self.ends(kind, p, v)
            ranks = tuple(sorted({first, last, 0, min(1, p - 1), p - 1}))
            self._structures[key] = Structure(
                first, last, ranks, {r: sum(self.stages_of(kind, p, v, r)) for r in ranks}
            )
        return self._structures[key]

    def parameters(self, tp: int, p: int) -> Parameters:
        """A block's, the embedding's and the head's elements on one tp rank, and their tensors."""
        key = (tp, p > 1)
        if key not in self._params:
            m = self.model
            self._params[key] = Parameters(
                Count(*count(layer_tensors(m), tp)),
                Count(*count(embedding_tensors(m, self.vocab_parallel), tp)),
                Count(*count(head_tensors(m, self.vocab_parallel, p), tp)),
            )
        return self._params[key]

    def activations(self, tp: int, cp: int, b: int, recompute: str) -> Activations:
        """What a block, the embedding and the head keep of one micro-batch under `recompute`."""
        key = (tp, cp, b, recompute)
        if key not in self._acts:
            m, sp = self.model, self.sequence_parallel
            option = recomputation.block_option(recompute)
            parts = layer_activation_parts(m, b, self.precision, tp, sequence_parallel=sp, cp=cp)
            if self.experts is not None:
                parts = {**parts, "other": parts["other"] + self.expert_activations(tp, cp, b)}
            self._acts[key] = Activations(
                option.kept(parts),
                option.transient(parts),
                embedding_activation_bytes(m, b, cp),
                head_activation_bytes(
                    m, b, self.precision, tp, sequence_parallel=sp, vocab_parallel=self.vocab_parallel, cp=cp
                ),
            )
        return self._acts[key]

    def stage_elements(self, tp: int, p: int, v: int) -> list[int]:
        """Parameter elements of each of the p·v stages on one tp rank: its blocks, the embedding on
        the first stage, the head on the last. The one place this rule lives (a rank's memory and
        reduction, the simulated step's gradients)."""
        key = (tp, p, v)
        if key not in self._stage_elements:
            (block, _), (emb, _), (head, _) = self.parameters(tp, p)
            held = [n * block for n in self.counts(p, v)]
            held[0] += emb
            held[-1] += head
            self._stage_elements[key] = held
        return self._stage_elements[key]

    def moe_blocks(self, kind: str, p: int, v: int, r: int) -> int:
        """The MoE blocks among pipeline rank r's: its blocks but those of the first dense_layers."""
        key = (kind, p, v, r)
        if key not in self._moe_blocks:
            dense = self.experts.dense_layers if self.experts is not None else self.model.layers
            start, n = 0, 0
            for count_, owner in zip(self.counts(p, v), placement(kind, p, v)):
                if owner == r:
                    n += count_ - max(0, min(count_, dense - start))
                start += count_
            self._moe_blocks[key] = n
        return self._moe_blocks[key]

    def first_moe_rank(self, kind: str, p: int, v: int) -> int:
        """The rank owning the first stage with no dense block: it and the ranks before it may hold
        the most (the most experts, the most micro-batches)."""
        dense = self.experts.dense_layers if self.experts is not None else 0
        start = 0
        for count_, owner in zip(self.counts(p, v), placement(kind, p, v)):
            if start >= dense:
                return owner
            start += count_
        return p - 1

    def expert_elements(self, tp: int, ep: int) -> tuple[float, float]:
        """(what a MoE block holds beyond its dense equivalent, of which its routed experts) in
        elements on one tp rank, its experts split over ep."""
        moe, h = self.experts, self.model.hidden
        if moe is None:
            return 0.0, 0.0
        expert = mlp_parameters(self.model, moe.ffn) / tp
        router = moe.experts * h + moe.experts * moe.router_bias
        routed = moe.experts // ep * expert
        return router + routed - moe.top_k * expert, routed

    def expert_activations(self, tp: int, cp: int, b: int) -> float:
        """What a MoE block keeps beyond its dense equivalent, one micro-batch: the router's fp32
        scores, the experts' inputs (each token's copy for each of its top_k experts, whole on every
        tp rank; capacity_factor × as many slots when padded to capacity) and, padded, the experts'
        inner activations' padding (split over tp)."""
        moe, shape, e = self.experts, self.model, self.value
        assert moe is not None
        tokens = b * shape.seq / cp
        slots = (moe.capacity_factor or 1.0) * moe.top_k * tokens  # dropless: every choice, evenly routed
        inner = (4 if shape.gated else 2) * e * moe.ffn / tp  # per slot
        return 4.0 * tokens * moe.experts + slots * e * shape.hidden + (slots - moe.top_k * tokens) * inner

    def elements(self, kind: str, tp: int, p: int, v: int, r: int, ep: int = 1) -> float:
        """Parameter elements pipeline rank r holds (before ZeRO shards them): its stages', its experts
        split over ep."""
        extra = self.moe_blocks(kind, p, v, r) * self.expert_elements(tp, ep)[0] if self.experts else 0.0
        return sum(n for n, owner in zip(self.stage_elements(tp, p, v), placement(kind, p, v)) if owner == r) + extra

    def expert_share(self, kind: str, tp: int, p: int, v: int, r: int, ep: int = 1) -> float:
        """Of elements(), the routed experts' (sharded by ZeRO over the edp ranks)."""
        return self.moe_blocks(kind, p, v, r) * self.expert_elements(tp, ep)[1] if self.experts else 0.0

    def state(
        self, kind: str, tp: int, p: int, v: int, shards: int, zero: int, r: int, ep: int = 1, expert_shards: int = 1
    ) -> ModelState:
        """The parameters', gradients' and optimizer's bytes on pipeline rank r, `shards` ranks
        sharing ZeRO's split (`expert_shards` that of the routed experts, over ep)."""
        key = (kind, tp, p, v, shards, zero, r, ep, expert_shards)
        if key not in self._state:
            (block, block_t), (_, emb_t), (_, head_t) = self.parameters(tp, p)
            n = sum(self.stages_of(kind, p, v, r))
            ends = self.ends(kind, p, v)
            first, last = r == ends[0], r == ends[1]
            elements = self.elements(kind, tp, p, v, r, ep)
            routed = self.expert_share(kind, tp, p, v, r, ep)
            sharded = (elements - routed) / shards + routed / expert_shards  # what ZeRO leaves each rank
            tensors = n * block_t + (emb_t if first else 0) + (head_t if last else 0)
            params: float = elements * self.per.parameters
            grads: float = elements * self.grad
            state = sharded * self.per.optimizer + (4 * tensors if self.optimizer == "adam" else 0)
            whole = block + (self.expert_elements(tp, ep)[0] if self.moe_blocks(kind, p, v, r) else 0.0)
            if zero >= 2:
                grads = sharded * self.grad + whole * self.grad  # + one block's before its reduce-scatter
            if zero == 3:
                params = sharded * self.per.parameters + 2 * whole * self.value  # + two blocks gathered
            self._state[key] = ModelState(params, grads, state)
        return self._state[key]

    def activation(self, layout: Layout, r: int, inflight: int | None = None) -> float:
        """Activation bytes on pipeline rank r; `inflight`: the micro-batch chunks it holds at once
        (default: the schedule's peak_inflight)."""
        p, v, kind = layout.pp, layout.v, layout.schedule
        chunks = inflight
        if chunks is None:
            peak = kinds.get(kind).peak_inflight
            assert peak is not None  # a planned kind has the formula (timing.plannable)
            chunks = peak(p, layout.m, v, r)
        first, last = self.ends(kind, p, v)
        return self.held(
            self.activations(layout.tp, layout.cp, layout.micro_batch, layout.recompute),
            chunks=chunks,
            v=v,
            deepest=max(self.stages_of(kind, p, v, r)),
            first=r == first,
            last=r == last,
        )

    @staticmethod
    def held(activations: Activations, *, chunks: int, v: int, deepest: int, first: bool, last: bool) -> float:
        """Activation bytes of a rank holding `chunks` micro-batch chunks of `deepest` blocks each
        (its largest stage's), with `activations` as Footprint.activations gives them, and the
        embedding's or the head's where it holds the first or the last stage."""
        kept, transient, emb_act, head_act = activations
        held = -(-chunks // v)  # micro-batches that chunk 0 (or the last chunk) holds
        return (
            chunks * deepest * kept
            + transient
            + (held * emb_act if first else 0.0)
            + (held * head_act if last else 0.0)
        )

    def of_rank(self, layout: Layout, r: int, inflight: int | None = None) -> dict[str, float]:
        """Bytes pipeline rank r's GPU holds, by kind (shapes.KINDS)."""
        params, grads, state = self.state(
            layout.schedule,
            layout.tp,
            layout.pp,
            layout.v,
            layout.zero_shards,
            layout.zero,
            r,
            layout.ep,
            layout.expert_shards,
        )
        return {
            "parameters": params,
            "gradients": grads,
            "optimizer": state,
            "activations": self.activation(layout, r, inflight),
        }


def memory_per_rank(
    model: ModelShape,
    layout: Layout,
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    *,
    sequence_parallel: bool = True,
    vocab_parallel: bool = True,
    fp32_gradients: bool = False,
    ranks: Sequence[int] | None = None,
    experts: Experts | None = None,
) -> list[dict[str, float]]:
    """Bytes each pipeline rank's GPU holds (or those of `ranks`), by kind (shapes.KINDS), for one
    tp (and cp) shard; see the module docstring."""
    fp = Footprint(
        model,
        precision,
        optimizer,
        sequence_parallel=sequence_parallel,
        vocab_parallel=vocab_parallel,
        fp32_gradients=fp32_gradients,
        experts=experts,
    )
    return [fp.of_rank(layout, r) for r in (range(layout.pp) if ranks is None else ranks)]
