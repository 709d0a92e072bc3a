"""Where the bytes move and what each rank's memory holds, by kind: formulas from a plan's shapes.

What a rank sends in one training step comes in the six kinds of traffic.py (pp activation, pp
gradient, tp all-reduce, tp all-gather, cp ring, dp all-reduce), each collective counted as what a
ring algorithm sends (traffic.ring_bytes), each ring attention step as what it passes on
(traffic.ring_attention_steps). The engine counts the same kinds as it runs (comm.Mailbox, the
tensor-parallel layers' hook, ring attention's, the gradient reducer's buckets);
tests/test_mesh_run.py and tests/test_context_run.py check that they equal `expected_bytes`. `step_traffic` and `activation_bytes` hand the simulator what a
run's plan moves (traffic.py's Traffic, the bytes between stages), so that it can be calibrated
on the run and predict it (sim/measured_costs.py).

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
    replicas = mesh.size("dp_cp")      # the ranks with the same parameters: gradients averaged over them
    if replicas > 1:
        out[TrafficKind.DP_ALL_REDUCE] = ring_bytes(TrafficKind.DP_ALL_REDUCE, parameter_bytes(plan, rank, layers),
                                                    replicas)
    return out


def parameter_bytes(plan, rank: int, layers) -> int:
    """Bytes of the parameters global `rank` holds: its stages' layers, its tensor-parallel shard."""
    mesh = plan.mesh
    c = mesh.coords(rank)
    total = 0
    for s in plan.schedule.stages_of(c.pp):
        for i in plan.partition.layers_of(s):
            layer = layers[i] if mesh.tp == 1 else tensor_parallel(layers[i], c.tp, mesh.tp)
            total += sum(p.numel() * p.element_size() for p in layer.parameters() if p.requires_grad)
    return total


def step_traffic(plan, layers) -> Traffic:
    """What one step of the plan moves besides the activations between stages, for the mesh
    simulator: each stage's tensor-parallel collectives and ring attention steps per op, its
    gradients' sizes (this rank's tp shard), the bucket size. `layers`: the whole model's full layers."""
    tp, cp, cut = plan.mesh.tp, plan.mesh.cp, plan.partition
    calls, rings, grads = [], [], []
    for s in range(cut.n_stages):
        per_op = {"F": [], "B": [], "I": []}
        ring = {"F": [], "B": [], "I": []}
        sizes = []
        for i in cut.layers_of(s):
            shape, dtype = plan.layer_shapes[i]
            for c in collectives(layers[i], shape, tp, dtype, input_grad=i > 0):
                for op in TP_OPS[c.phase]:
                    per_op[op].append((c.kind, c.nbytes))
            for phase, ops in TP_OPS.items():    # ring attention runs where the layer's f and g do
                for step in ring_steps(layers[i], shape, dtype, tp, cp, phase):
                    for op in ops:
                        ring[op].append(step)
            layer = tensor_parallel(layers[i], 0, tp) if tp > 1 else layers[i]
            sizes += [p.numel() * p.element_size() for p in layer.parameters() if p.requires_grad]
        calls.append(per_op)
        rings.append(ring)
        grads.append(sizes)
    return Traffic(tuple(calls), tuple(grads), plan.config.dp_bucket_bytes, tuple(rings) if cp > 1 else ())


@dataclass
class Memory:
    """What one rank's memory holds, in bytes, measured in the run (tensor sizes: the same on CPU
    and GPU). `device_peak` is the CUDA allocator's peak on a GPU (None on the CPU), which also
    counts workspace, fragmentation and what these kinds leave out."""

    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0          # peak bytes autograd kept for backward at once
    dp_buckets: int = 0           # the gradient reducer's flat buffers (one more copy, as DDP keeps)
    device_peak: int | None = None
    stashed_weights: int = 0      # no flush (engine/weight_stash.py): peak bytes of weight versions kept besides the live ones

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.dp_buckets \
            + self.stashed_weights


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
