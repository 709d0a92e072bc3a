"""One transformer block's forward and backward on one GPU, per micro-batch, its collectives included.

compute     compute.py: the block's matmuls, attention and element-wise work from their shapes;
            recomputation repeats what sim/recompute_costs.py says
tp          a ring all-reduce of a micro-batch's activation (an all-gather and a reduce-scatter
            with sequence parallelism, the same bytes) on the tp group's link: two per block
            forward, two backward, two more with full recomputation; inside the action, or
            hidden behind its matmuls with tp_overlap. Tensor parallelism across nodes is
            allowed: its ring then runs at the network's pace
cp          ring attention: each block's forward passes K and V chunks around the cp ranks
            (cp − 1 steps), the backward K, V with their gradients (cp − 1 steps) and the
            gradients home (one more): traffic.ring_attention_steps, the rule the engine
            counts and the mesh simulator replays, timed by sim/network.ring_attention_time;
            hidden behind the attention's own compute where it is longer (a GPU's kernels
            post the next block's transfer before computing the current one)
zero        ZeRO 2: each micro-batch's gradients reduce-scattered during its backward; ZeRO 3
            (FSDP): each block's parameters all-gathered before its forward and again before
            its backward, its gradients reduce-scattered after; what the compute does not
            hide adds to the action
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sim import recompute_costs as recomputation
from ..sim.network import Link, ring, ring_attention_time
from .compute import BlockCosts
from .footprint import Footprint
from .setup_and_layout import Layout, Setup
from .shapes import VALUE_BYTES, hidden_bytes, ring_kv_bytes


@dataclass(frozen=True)
class BlockTime:
    """One block, one micro-batch, one GPU, in seconds."""

    forward: float  # its forward, with what its tp, cp and ZeRO collectives expose
    backward: float  # its whole backward (input and weight gradients, any recomputation), the same
    weight: float  # of the backward, the weight-gradient part (what a split backward's W takes)
    compute: float  # forward and backward, compute alone
    tp: float  # tensor-parallel collectives exposed, forward and backward
    cp: float  # ring attention's exchange exposed, forward and backward
    zero: float  # ZeRO 2/3 collectives exposed, forward and backward
    tp_collective: float  # one tensor-parallel collective of one activation (the vocab-parallel embedding's)
    ep: float = 0.0  # a MoE block's all-to-alls, forward and backward (evaluate.Predictor adds them)


def tp_collectives(recompute: str) -> tuple[int, int]:
    """A block's tensor-parallel collectives per micro-batch, (forward, backward): Megatron's g after
    attention and after the MLP in the forward, their f in the backward, and the forward's again in
    the backward under full recomputation. The one place this count lives (the block's time, the
    planner's simulated step)."""
    return 2, (4 if recompute == "full" else 2)


def embedding_tp_collectives(vocab_parallel: bool) -> int:
    """The embedding's tensor-parallel collectives per micro-batch, all in its forward: one
    all-reduce of its output when it is split over the vocabulary (Megatron's
    VocabParallelEmbedding), none when every tp rank holds it whole (minipipe's engine). The one
    place this count lives (the closed-form step, the planner's simulated step)."""
    return 1 if vocab_parallel else 0


def block_time(
    setup: Setup, footprint: Footprint, links: dict[str, Link], costs: BlockCosts, layout: Layout
) -> BlockTime:
    """The block's time under `layout` from its compute `costs` (compute.block_costs) and the
    `links` its tp, cp and dp groups use (setup_and_layout.links): see the module docstring."""
    tp, cp, b, rc, z = layout.tp, layout.cp, layout.micro_batch, layout.recompute, layout.zero
    s, model, bc, net = setup, setup.model, costs, links
    e, g = VALUE_BYTES[s.precision], s.grad_bytes
    option = recomputation.block_option(rc)
    redo = (
        0.0
        if (model.attention == "fused" and option.name == "selective")
        else option.redone({"attention core": bc.core, "other": bc.forward - bc.core})
    )
    activation = hidden_bytes(model, b, e, cp=cp)  # one micro-batch's, whole
    # tensor parallelism: one collective of the activation; 2 per block forward, 2 (4) backward
    t1 = ring("all-reduce", activation, tp, net["tp"]) if tp > 1 else 0.0
    full = rc == "full"
    calls_f, calls_b = tp_collectives(rc)
    tp_f, tp_b = calls_f * t1, calls_b * t1
    if s.tp_overlap:
        tp_f = max(0.0, tp_f - bc.matmuls)
        tp_b = max(0.0, tp_b - (3 if full else 2) * bc.matmuls)
    # context parallelism: K and V chunks around the ring, hidden behind attention where it is longer
    cp_f = cp_b = 0.0
    if cp > 1:
        kv = ring_kv_bytes(model, b, e, tp, cp)
        cp_f = max(0.0, ring_attention_time("forward", kv, cp, net["cp"]) - bc.core)
        cp_b = max(0.0, ring_attention_time("backward", kv, cp, net["cp"]) - bc.core_backward) + (cp_f if full else 0.0)
    # ZeRO 2 / 3: per micro-batch and block collectives over the replicas (Layout.replicas)
    n = layout.replicas
    zero_f = zero_b = 0.0
    if n > 1 and z >= 2:
        block_elems = footprint.parameters(tp, 1).block.elements + footprint.expert_elements(tp, layout.ep)[0]
        rs = ring("reduce-scatter", block_elems * g, n, net["dp"])
        ag = ring("all-gather", block_elems * e, n, net["dp"]) if z == 3 else 0.0
        zero_f = max(0.0, ag - (bc.forward + tp_f + cp_f))
        zero_b = max(0.0, ag + rs - (bc.backward_input + bc.backward_weight + redo + tp_b + cp_b))
    pure = bc.forward + bc.backward_input + bc.backward_weight + redo
    return BlockTime(
        forward=bc.forward + tp_f + cp_f + zero_f,
        backward=bc.backward_input + bc.backward_weight + redo + tp_b + cp_b + zero_b,
        weight=bc.backward_weight,
        compute=pure,
        tp=tp_f + tp_b,
        cp=cp_f + cp_b,
        zero=zero_f + zero_b,
        tp_collective=t1,
    )
