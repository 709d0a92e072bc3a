"""What every rank does: build its stages, then train for the configured steps.

The same function serves processes started by `minipipe.run` (one machine, a notebook or a
script) and by `torchrun` (many machines): the caller has already joined the process group
and passes a `report` callback for progress.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from . import checkpoint
from .comm import clock_offset
from .config import Plan
from .execute import Executor, StepRecord
from .models import task_of
from .partition import Partition
from .stage import Stage


@dataclass
class RankResult:
    """One rank's share of a run; launch.collect makes a RunResult of every rank's."""

    rank: int
    first_step: int                         # the step the run began at (> 0 when it resumed)
    losses: list[float]                     # per step; only the rank with the last stage has them
    records: list[tuple[int, StepRecord]]   # (step, what this rank saw) for each traced step
    state: dict                             # this rank's layers' state_dict, named as in the whole model
    grads: dict | None                      # this rank's gradients of the first step (config.return_grads)
    peak_held: int                          # most micro-batches (stage chunks) held at once
    peak_bytes: int                         # peak bytes of activations kept for backward
    step_ms: list[float]                    # wall time of each step, barrier to barrier


def train_rank(plan: Plan, rank: int, report, status=None) -> RankResult:
    """Run the plan's steps on this rank; returns this rank's share of the results."""
    c, schedule = plan.config, plan.schedule
    torch.set_num_threads(c.threads)
    device = torch.device("cuda", torch.cuda.current_device()) if plan.device == "cuda" else torch.device("cpu")
    task = task_of(c)
    stages = build_stages(plan, rank, task, device)
    named = _by_layer(stages, plan.partition, lambda p: p)        # "3.linear.weight" -> this rank's tensor
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(list(named.values()), lr=c.lr)
    first = checkpoint.load(plan.resume_from, named, optimizer) if plan.resume_from else 0
    fault = _fault_hook(c.fault, rank)
    if fault:
        fault(first, "start")      # a rank that is slow to start, before the ranks first talk
    if status is not None:
        status(first, -1, "barrier")    # built: waiting for the others, to line up the clocks
    offset = clock_offset(rank, schedule.p, device if plan.backend == "nccl" else None)   # gloo sends host memory
    executor = Executor(rank, schedule, stages, plan.shapes, device, plan.in_order, c.timeout,
                        clock=lambda: time.perf_counter() + offset, status=status, before_action=fault)
    needs_inputs = any(st.is_first for st in stages.values())
    needs_targets = any(st.is_last for st in stages.values())
    every = c.checkpoint_every or c.steps
    first_traced = c.steps - (c.trace_steps if c.trace_steps is not None else c.steps)

    losses, records, grads, starts = [], [], None, []
    for step in range(first, c.steps):
        x, y = task.batch(step)
        inputs = [t.to(device) for t in x.chunk(schedule.m)] if needs_inputs else None
        targets = [t.to(device) for t in y.chunk(schedule.m)] if needs_targets else None
        optimizer.zero_grad(set_to_none=True)
        if status is not None:
            status(step, -1, "barrier")
        dist.barrier()   # every step starts together, so its trace is one clean picture
        starts.append(time.perf_counter())
        record = executor.step(step, inputs, targets)
        if c.return_grads and step == first:
            grads = {name: p.grad.detach().cpu().clone() for name, p in named.items()}
        optimizer.step()
        if record.loss is not None:
            losses.append(record.loss)
            report("step", {"step": step, "loss": record.loss})
        if step >= first_traced:
            records.append((step, record))
        if c.checkpoint_dir and ((step + 1) % every == 0 or step + 1 == c.steps):
            checkpoint.save(c.checkpoint_dir, step + 1, rank, named, optimizer, plan.meta,
                            before_finish=fault and (lambda s=step + 1: fault(s, "save")))
    dist.barrier()
    starts.append(time.perf_counter())
    if status is not None:
        status(c.steps, 0, "done")
    return RankResult(rank, first, losses, records,
                      state=_by_layer(stages, plan.partition, lambda t: t.detach().cpu().clone(), state=True),
                      grads=grads,
                      peak_held=max((st.peak_held for st in stages.values()), default=0),
                      peak_bytes=sum(st.peak_bytes for st in stages.values()),
                      step_ms=[1000 * (b - a) for a, b in zip(starts, starts[1:])])


def build_stages(plan: Plan, rank: int, task, device) -> dict[int, Stage]:
    """This rank's stages. Every rank builds all layers from the seed, so the weights are
    those of the one-process model, then keeps its own."""
    layers, schedule = task.layers(), plan.schedule
    return {s: Stage(s, stage_module(layers, plan.partition, s).to(device), schedule.n_stages, schedule.m,
                     task.loss, split_backward=schedule.splits_backward(s))
            for s in schedule.stages_of(rank)}


def stage_module(layers: list, cut: Partition, stage: int) -> nn.Sequential:
    """Stage `stage`'s layers, as one module."""
    return nn.Sequential(*(layers[i] for i in cut.layers_of(stage)))


def _by_layer(stages: dict, cut: Partition, fn, state: bool = False) -> dict:
    """Name tensors as in `nn.Sequential(*task.layers())`: '<layer index>.<name>'."""
    out = {}
    for s, st in stages.items():
        items = st.module.state_dict().items() if state else st.module.named_parameters()
        for name, t in items:
            local, rest = name.split(".", 1)
            out[f"{cut.layers_of(s)[int(local)]}.{rest}"] = fn(t)
    return out


def _fault_hook(fault: dict | None, rank: int):
    """Tests inject failures here: raise, exit, or stop responding at a chosen action (or at
    "save": while writing the checkpoint of that step; at "start": before the ranks first talk)."""
    if not fault or fault.get("rank") != rank:
        return None

    def before(step, action):
        if step == fault.get("step", 0) and str(action) == fault.get("action", str(action)):
            kind = fault.get("kind", "raise")
            if kind == "raise":
                raise RuntimeError(f"injected fault at {action}")
            if kind == "exit":
                os._exit(3)
            if kind == "sleep":
                time.sleep(fault.get("seconds", 3600))
    return before
