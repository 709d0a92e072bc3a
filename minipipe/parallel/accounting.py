"""Where the bytes move and what each rank's memory holds, by kind: formulas from a plan's shapes.

What a rank sends in one training step comes in the six kinds of traffic.py (pp activation, pp
gradient, tp all-reduce, tp all-gather, cp ring, ep all-to-all, dp all-reduce), each collective
counted as what a ring algorithm sends (traffic.ring_bytes; an all-to-all's (ep−1)/ep alike), each
ring attention step as what it passes on (traffic.ring_attention_steps). The engine counts the
same kinds as it runs (comm.Mailbox, the tensor-parallel layers' hook, ring attention's, the MoE
layers' all-to-all hook, the gradient reducers' buckets); tests/parallel/test_mesh_run.py,
tests/parallel/test_context_run.py and tests/parallel/test_expert_run.py check that they equal `expected_bytes`.
`step_traffic` and `activation_bytes` hand the simulator what a run's plan moves (traffic.py's
Traffic, the bytes between stages), so that it can be calibrated on the run and predict it
(sim/measured_costs.py).

A plan is config.prepare's Plan; `layers` the whole model's full layers (task.layers()), which
the caller builds: this module knows no model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..schedule.ops import boundary
from ..traffic import KINDS, TP_OPS, Traffic, TrafficKind, message_kind, ring_bytes
from .context import ring_steps
from .expert import expert_modules, expert_parameters
from .tensor import collectives, tensor_parallel


def tensor_bytes(shape, dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def activation_bytes(plan) -> list[int]:
    """Per stage, the bytes of one micro-batch's output: the message to the next stage (the
    gradient coming back is the same size)."""
    return [tensor_bytes(*plan.shapes[s]) for s in range(plan.schedule.n_stages)]


def expected_bytes(plan, rank: int, layers=None) -> dict[TrafficKind, float]:
    """Bytes global `rank` sends in one step, by kind, from the plan's shapes. `layers`: the full
    model's layers (task.layers()), needed for the tensor- and context-parallel kinds."""
    mesh, schedule, cut = plan.mesh, plan.schedule, plan.partition
    q = mesh.coords(rank).pp
    out = dict.fromkeys(KINDS, 0.0)
    for producer, src, _ in schedule.messages:
        if src == q:
            out[message_kind(producer)] += tensor_bytes(*plan.shapes[boundary(producer)])
    if mesh.tp > 1:
        for s in schedule.stages_of(q):
            for i in cut.layers_of(s):
                shape, dtype = plan.layer_shapes[i]
                for c in collectives(layers[i], shape, mesh.tp, dtype, input_grad=i > 0):
                    out[c.kind] += schedule.m * ring_bytes(c.kind, c.nbytes, mesh.tp)
    if mesh.cp > 1:
        for s in schedule.stages_of(q):
            for i in cut.layers_of(s):
                shape, dtype = plan.layer_shapes[i]
                for phase in ("forward", "backward"):
                    for kind, nbytes in ring_steps(layers[i], shape, dtype, mesh.tp, mesh.cp, phase):
                        out[kind] += schedule.m * nbytes
    if mesh.ep > 1:
        for s in schedule.stages_of(q):
            for i in cut.layers_of(s):
                for kind, nbytes in all_to_alls(layers[i], plan.layer_shapes[i], "forward", "backward"):
                    out[kind] += schedule.m * ring_bytes(kind, nbytes, mesh.ep)
    # the ranks with the same parameters average their gradients: dp × cp for the dense ones, edp
    # for the experts when ep > 1 (each ep rank holds others)
    dense, experts = parameter_bytes(plan, rank, layers, split=True)
    out[TrafficKind.DP_ALL_REDUCE] = ring_bytes(TrafficKind.DP_ALL_REDUCE, dense, mesh.size("dp_cp")) + ring_bytes(
        TrafficKind.DP_ALL_REDUCE, experts, mesh.size("edp")
    )
    return out


def all_to_alls(layer, input_shape, *phases) -> list[tuple[TrafficKind, float]]:
    """The all-to-all buffers (bytes) of one micro-batch through `layer` in these phases, in
    order: every mixture-of-experts module's (its `exchanges`, traffic.moe_exchanges)."""
    shape, dtype = input_shape
    size = torch.empty((), dtype=dtype).element_size()
    return [
        (TrafficKind.EP_ALL_TO_ALL, nb)
        for phase in phases
        for m in expert_modules(layer)
        for nb in m.exchanges(phase, shape, size)
    ]


def parameter_bytes(plan, rank: int, layers, split: bool = False):
    """Bytes of the parameters global `rank` holds: its stages' layers, its tensor-parallel shard,
    its share of the experts (1/ep of each MoE layer's). split=True: (dense, experts) apart."""
    mesh = plan.mesh
    c = mesh.coords(rank)
    dense: float = 0
    experts: float = 0
    for s in plan.schedule.stages_of(c.pp):
        for i in plan.partition.layers_of(s):
            layer = layers[i] if mesh.tp == 1 else tensor_parallel(layers[i], c.tp, mesh.tp)
            ones, theirs = trained_bytes(layer, mesh.ep)
            dense += sum(ones)
            if theirs:
                experts += sum(theirs) / mesh.ep
    return (dense, experts) if split else dense + experts


def trained_bytes(layer, ep: int) -> tuple[list[int], list[int]]:
    """The bytes of each of `layer`'s trained parameters: (dense, experts). With ep == 1 the experts are
    replicated like the rest, averaged with them over dp × cp, so they count as dense."""
    theirs = {id(p) for p in expert_parameters(layer)} if ep > 1 else set()
    held = [p for p in layer.parameters() if p.requires_grad]
    return (
        [p.numel() * p.element_size() for p in held if id(p) not in theirs],
        [p.numel() * p.element_size() for p in held if id(p) in theirs],
    )


def step_traffic(plan, layers) -> Traffic:
    """What one step of the plan moves besides the activations between stages, for the mesh
    simulator: each stage's tensor-parallel collectives, ring attention steps and all-to-alls per
    op, its gradients' sizes (this rank's tp shard; its experts' apart), the bucket size.
    `layers`: the whole model's full layers."""
    tp, cp, ep, cut = plan.mesh.tp, plan.mesh.cp, plan.mesh.ep, plan.partition
    calls, rings, exchanges, grads, expert_grads = [], [], [], [], []
    for s in range(cut.n_stages):
        per_op = {"F": [], "B": [], "I": []}
        ring = {"F": [], "B": [], "I": []}
        swaps = {"F": [], "B": [], "I": []}
        sizes, expert_sizes = [], []
        for i in cut.layers_of(s):
            shape, dtype = plan.layer_shapes[i]
            for c in collectives(layers[i], shape, tp, dtype, input_grad=i > 0):
                for op in TP_OPS[c.phase]:
                    per_op[op].append((c.kind, c.nbytes))
            for phase, ops in TP_OPS.items():  # ring attention and the all-to-alls run where the layer's f and g do
                for step in ring_steps(layers[i], shape, dtype, tp, cp, phase):
                    for op in ops:
                        ring[op].append(step)
                for op in ops:
                    swaps[op] += all_to_alls(layers[i], plan.layer_shapes[i], phase) if ep > 1 else []
            ones, theirs = trained_bytes(tensor_parallel(layers[i], 0, tp) if tp > 1 else layers[i], ep)
            sizes += ones
            # one rank's share: E/ep experts (they are alike, so every rank's share is the same size)
            expert_sizes += theirs[: len(theirs) // ep]
        calls.append(per_op)
        rings.append(ring)
        exchanges.append(swaps)
        grads.append(sizes)
        expert_grads.append(expert_sizes)
    return Traffic(
        tuple(calls),
        tuple(grads),
        plan.config.dp_bucket_bytes,
        tuple(rings) if cp > 1 else (),
        ep=tuple(exchanges) if ep > 1 else (),
        expert_grads=tuple(expert_grads) if ep > 1 else (),
    )


@dataclass
class Memory:
    """What one rank's memory holds, in bytes, measured in the run (tensor sizes: the same on CPU
    and GPU). `device_peak` is the CUDA allocator's peak on a GPU (None on the CPU), which also
    counts workspace, fragmentation and what these kinds leave out."""

    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0  # peak bytes autograd kept for backward at once
    dp_buckets: int = 0  # the gradient reducer's flat buffers (one more copy, as DDP keeps)
    device_peak: int | None = None
    stashed_weights: int = (
        0  # no flush (engine/weight_stash.py): peak bytes of weight versions kept besides the live ones
    )

    @property
    def total(self) -> int:
        return (
            self.parameters
            + self.gradients
            + self.optimizer
            + self.activations
            + self.dp_buckets
            + self.stashed_weights
        )


def tensors_bytes(tensors) -> int:
    """Bytes of distinct tensors (a tensor shared twice counts once)."""
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def optimizer_bytes(optimizer) -> int:
    return tensors_bytes(v for state in optimizer.state.values() for v in state.values())
