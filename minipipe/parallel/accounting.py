"""Where the bytes move and what each rank's memory holds, by kind: formulas from shapes alone.

What a rank sends in one training step, by kind:

    pp activation   a forward's output to the next stage's rank         (point to point)
    pp gradient     a backward's input gradient to the previous stage's  (point to point)
    tp all-reduce   Megatron's f and g inside tensor-parallel layers     (each micro-batch, each layer)
    tp all-gather   a column-parallel output gathered whole (the MLP's layers)
    dp all-reduce   the gradient average across replicas, once a step

A point-to-point message counts its tensor's bytes. A collective counts what each rank sends
with a ring algorithm: 2(n−1)/n of the buffer for an all-reduce (a reduce-scatter, then an
all-gather), (n−1)/n for an all-gather — the usual model (e.g. NCCL's "bus bandwidth"). The
engine counts the same kinds as it runs (comm.Mailbox, the tensor-parallel layers' hook, the
gradient reducer's buckets); tests/test_mesh_run.py checks that they equal these formulas.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..schedule.ops import boundary
from ..schedule.validate import transfers
from .data import ring_allreduce_bytes
from .tensor import Collective, collectives, tensor_parallel

KINDS = ("pp activation", "pp gradient", "tp all-reduce", "tp all-gather", "dp all-reduce")
TP_KIND = {"all_reduce": "tp all-reduce", "all_gather": "tp all-gather"}


def tensor_bytes(shape, dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def message_kind(producer) -> str:
    return "pp activation" if producer.op == "F" else "pp gradient"


def tp_wire_bytes(kind: str, nbytes: int, tp: int) -> int:
    """What one rank sends for one tensor-parallel collective of an `nbytes` result."""
    return Collective(kind, "", nbytes).wire_bytes(tp)


def expected_bytes(plan, rank: int, layers=None) -> dict[str, float]:
    """Bytes global `rank` sends in one step, by kind, from the plan's shapes. `layers`: the full
    model's layers (task.layers()), needed for the tensor-parallel kinds when tp > 1."""
    mesh, schedule, cut = plan.mesh, plan.schedule, plan.partition
    q = mesh.coords(rank).pp
    out = dict.fromkeys(KINDS, 0.0)
    for producer, src, _ in transfers(schedule):
        if src == q:
            out[message_kind(producer)] += tensor_bytes(*plan.shapes[boundary(producer)])
    stages = schedule.stages_of(q)
    if mesh.tp > 1:
        for s in stages:
            for i in cut.layers_of(s):
                shape, dtype = plan.layer_shapes[i]
                for c in collectives(layers[i], shape, mesh.tp, dtype, input_grad=i > 0):
                    out[TP_KIND[c.kind]] += schedule.m * c.wire_bytes(mesh.tp)
    if mesh.dp > 1:
        out["dp all-reduce"] = ring_allreduce_bytes(parameter_bytes(plan, rank, layers), mesh.dp)
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

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.dp_buckets


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
