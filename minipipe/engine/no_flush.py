"""Training without a flush: a schedule of several steps (Schedule.updates) run as one.

A flushed kind trains one step at a time (train.py): the executor runs the step's lists, every
rank waits at the end, the optimizer steps. PipeDream and PipeDream-2BW have no such end: their
schedule is one 1F1B over every step's micro-batches, and each stage's weights are updated inside
it where the schedule's rule says (weight_stash.py, on every stage). So the executor runs the
whole schedule in one call, taking step t's micro-batches from the task's batch of step t as it
reaches them, and the run's record is one Trace of every step.

What a flush gives, and these runs do not: a step boundary where every stage holds one version of
the weights. So a run without a flush refuses what needs one (checkpoints, resuming, gradients of
a step), and what minipipe only runs on flushed steps (data and tensor parallelism, recomputation,
your own F and B); `run_checks.check_no_flush` says which, before any process starts.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from ..models.catalog import task_of
from ..parallel.accounting import optimizer_bytes
from .faults import fault_hook
from .rank_stages import by_layer
from .train import NonFiniteLoss, RankResult, RankStep
from .weight_stash import WeightStash


class StepBatches:
    """Micro-batch mb of the run, as a flushed run would cut it: step mb // m's batch, piece mb % m
    (inputs or targets); the task's batch of a step is made once, when its first micro-batch is
    wanted."""

    def __init__(self, task, per_step: int, device, which: int):
        self.task, self.per_step, self.device, self.which = task, per_step, device, which
        self.cache: dict[int, tuple] = {}

    def __getitem__(self, mb: int) -> torch.Tensor:
        step = mb // self.per_step
        if step not in self.cache:
            self.cache = {s: v for s, v in self.cache.items() if s >= step - 1}  # 1F1B reaches steps in order
            self.cache[step] = self.task.batch(step)[self.which].to(self.device).chunk(self.per_step)
        return self.cache[step][mb % self.per_step]

    def __call__(self, mb: int, *fed) -> torch.Tensor:  # the executor's lazy inputs
        return self[mb]


def train_no_flush(plan, rank: int, report, status=None) -> RankResult:
    """Run the whole schedule on this rank (train.train_steps's counterpart for Schedule.updates)."""
    c, s = plan.config, plan.schedule
    torch.set_num_threads(c.threads)
    me = RankStep(plan, rank, status, fault_hook(c.fault, rank))
    optimizer = torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD
    for k, st in me.stages.items():  # each stage updates on its own, when its rule says
        st.weights = WeightStash(k, st.module, s.versions, optimizer(st.module.parameters(), lr=c.lr))
    me.start(0)
    task = task_of(c)
    inputs = StepBatches(task, s.updates.per_step, me.device, 0) if me.needs_inputs else None
    targets = StepBatches(task, s.updates.per_step, me.device, 1) if me.needs_targets else None
    if status is not None:
        status(0, -1, "barrier")
    dist.barrier()  # the ranks start together: the trace is one clean picture
    began, cpu = time.perf_counter(), time.process_time()
    record = me.executor.step(0, inputs, targets)
    dist.barrier()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    if status is not None:
        status(c.steps, 0, "done")
    losses = record.losses or []
    for step, loss in enumerate(losses):
        if not math.isfinite(loss):
            raise NonFiniteLoss(
                f"the loss is {loss} at step {step}, the first that is not finite; lower lr (now "
                f"{c.lr:g}), or look for values that overflow in the model or its data"
            )
        report("step", {"step": step, "loss": loss})
    stashes = [st.weights for st in me.stages.values()]
    memory = me.memory()
    memory.optimizer = sum(optimizer_bytes(w.optimizer) for w in stashes)
    memory.stashed_weights = sum(w.stashed_bytes for w in stashes)
    me.close()
    return RankResult(
        rank,
        me.where,
        0,
        losses,
        [(0, record)],
        state=by_layer(me.stages, plan.partition, lambda t: t.detach().cpu().clone(), state=True),
        grads=None,
        shards=me.shards,
        peak_held=me.executor.peak_held,
        peak_bytes=memory.activations,
        memory=memory,
        step_ms=[1000 * took],
        weight_versions=sum(w.peak_versions for w in stashes),
        cpu_ms=1000 * cpu,
    )
