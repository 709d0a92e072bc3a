"""One layout predicted: its memory by kind, its step time by part, its throughput (a Row).

Every figure comes from a formula used elsewhere in minipipe:

    memory      memory.py (shapes.py's parameters per tp shard and activations after Korthikanti
                et al. 2022, × the schedule's micro-batches in flight, kinds.py)
    compute     shapes.py's FLOPs / (the GPU's peak × `efficiency`, the achieved fraction of peak)
    tp          network.py's ring all-reduce of a micro-batch's activation, inside a node: two per
                block forward, two backward (two more with full recomputation), inside the action
    pp          a message per micro-batch and stage boundary (the activation split over tp, as
                Megatron sends it); what it adds to the step is what the simulator finds
    pipeline    timing.py's closed form of the kinds' makespan, the busiest rank (the last runs the
                head too) pacing the steady state (equal to simulate_mesh's step when the blocks
                divide evenly over the stages, tests/test_plan.py)
    dp          network.py's ring all-reduce of a rank's gradients over its dp group, started when
                the rank's last backward ends (as simulate_mesh does): it overlaps the cool-down on
                every rank but the first, whose all-reduce adds to the step
    MFU         model FLOPs (shapes.model_flops, no recomputation) / (GPUs × peak × step)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..sim.network import ring
from .layout import GiB, Layout, Setup
from .memory import memory_per_rank
from .shapes import (VALUE_BYTES, bytes_per_parameter, count, head_flops, layer_flops, layer_tensors, model_flops,
                     recompute_flops, stage_layers)
from .timing import pipeline_time


@dataclass
class Row:
    """One layout's prediction. Times in seconds per step; memory in bytes on the GPU that needs
    most (pipeline rank `memory_rank`); comm: seconds per step by kind on the busiest rank (tp
    inside its actions, pp on the pipeline's critical path, dp its all-reduce; "dp exposed" the
    part that adds to the step)."""

    layout: Layout
    step: float
    pipeline: float
    compute: float
    bubble: float
    comm: dict
    memory: dict
    memory_rank: int
    tflops: float          # model TFLOP/s per GPU
    mfu: float
    hfu: float             # with recomputation's FLOPs
    capacity: float        # the GPU's memory, bytes

    @property
    def fits(self) -> bool:
        return sum(self.memory.values()) <= self.capacity

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    def why(self) -> str:
        """Why it does not fit, for people."""
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in sorted(self.memory.items(), key=lambda kv: -kv[1]))
        return (f"needs {self.total_memory / GiB:.1f} GiB of {self.capacity / GiB:.1f} GiB on pipeline rank "
                f"{self.memory_rank} ({parts} GiB)")

    def as_dict(self) -> dict:
        lay = self.layout
        return {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "micro_batch": lay.micro_batch, "m": lay.m,
                "schedule": lay.schedule, "v": lay.v, "recompute": lay.recompute, "step_s": self.step,
                "pipeline_s": self.pipeline, "compute_s": self.compute, "bubble": self.bubble,
                **{f"{k.replace(' ', '_')}_s": v for k, v in self.comm.items()},
                **{f"{k}_bytes": v for k, v in self.memory.items()}, "memory_bytes": self.total_memory,
                "memory_rank": self.memory_rank, "fits": self.fits, "tflops_per_gpu": self.tflops, "mfu": self.mfu,
                "hfu": self.hfu}


def evaluate(setup: Setup, layout: Layout) -> Row:
    """Predict one layout (the module docstring says where each figure comes from)."""
    model, gpu, net = setup.model, setup.gpu, setup.network
    tp, p, dp, v, b, m = layout.tp, layout.pp, layout.dp, layout.v, layout.micro_batch, layout.m
    if layout.gpus != setup.gpus or p * v > model.layers or dp * b * m != setup.batch:
        raise ValueError(f"{layout} does not fit the setup: tp·pp·dp must be {setup.gpus} GPUs, pp·v at most the "
                         f"{model.layers} layers, and dp·micro_batch·m the batch of {setup.batch} sequences")
    flops_per_s = gpu.peak * setup.achieved
    tokens = b * model.seq
    e = VALUE_BYTES[setup.precision]
    # one block, one micro-batch, on one tp rank
    fwd = layer_flops(model, tokens) / tp / flops_per_s
    extra = recompute_flops(model, tokens, layout.recompute) / tp / flops_per_s
    activation = e * tokens * model.hidden
    ar = ring("all-reduce", activation, tp, net.link((0, tp - 1)))          # tp ranks are consecutive
    tp_f, tp_b = 2 * ar, (4 if layout.recompute == "full" else 2) * ar
    head_div = tp if setup.vocab_parallel else 1
    head_f = head_flops(model, tokens) / head_div / flops_per_s
    counts = stage_layers(model.layers, p * v)
    # rank 0 has the most blocks (earlier stages take any extra ones), the last rank the head, rank
    # 1 the most blocks of the rest: what the busiest rank, the mean and the dp tail need
    ranks = sorted({0, 1, p - 1} & set(range(p)))
    per_block = 3 * fwd + extra + tp_f + tp_b
    work, comp, talk_tp, back = {}, {}, {}, {}
    for r in ranks:
        n, last = sum(counts[r::p]), r == p - 1
        comp[r] = n * (3 * fwd + extra) + (3 * head_f if last else 0.0)
        talk_tp[r] = n * (tp_f + tp_b)
        back[r] = n * (2 * fwd + extra + tp_b) + (2 * head_f if last else 0.0)
        work[r] = comp[r] + talk_tp[r]
    mean = (model.layers * per_block + 3 * head_f) / p
    message = net.send(activation / tp, 0, dp * tp) if p > 1 else 0.0     # pipeline ranks 0 and 1 of slice 0
    busiest = max(ranks, key=lambda r: work[r])
    pipe = pipeline_time(layout.schedule, p, m, v, work[busiest], mean, message)
    pp_comm = pipe - pipeline_time(layout.schedule, p, m, v, work[busiest], mean, 0.0)
    # memory: the first rank holds the most micro-batches and the embedding, the last the head; every
    # other rank holds no more than the first (the earlier stages take any extra blocks)
    ends = sorted({0, p - 1})
    mem = dict(zip(ends, memory_per_rank(model, layout, setup.precision, setup.optimizer, ranks=ends,
                                         sequence_parallel=setup.sequence_parallel, vocab_parallel=setup.vocab_parallel,
                                         distributed_optimizer=setup.distributed_optimizer)))
    # data parallelism: each rank's gradients, all-reduced over its dp group after its last backward;
    # pipeline rank r's dp group (slice 0) is the ranks r·dp·tp, ..., (r·dp + dp − 1)·tp
    grads = count(layer_tensors(model), tp)[0] * bytes_per_parameter(setup.precision, setup.optimizer).gradients
    dp_times = {}
    for r in ranks:
        nbytes = mem[r]["gradients"] if r in mem else grads * sum(counts[r::p])
        link = net.link((r * dp * tp, (r * dp + dp - 1) * tp))
        dp_times[r] = ring("all-reduce", nbytes, dp, link)
    if setup.dp_overlap:
        exposed = max(max(0.0, t - r * (back[r] / v + message)) for r, t in dp_times.items())
    else:
        exposed = max(dp_times.values())
    step = pipe + exposed
    useful = model_flops(model, setup.batch)
    redo = recompute_flops(model, setup.batch * model.seq, layout.recompute) * model.layers
    whole = setup.gpus * gpu.peak * step
    fullest = max(ends, key=lambda r: sum(mem[r].values()))
    return Row(layout, step, pipe, m * comp[busiest], 1 - m * work[busiest] / pipe,
               {"tp": m * talk_tp[busiest], "pp": pp_comm, "dp": max(dp_times.values()), "dp exposed": exposed},
               mem[fullest], fullest, useful / setup.gpus / step / 1e12, useful / whole, (useful + redo) / whole,
               gpu.memory)
