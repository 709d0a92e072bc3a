"""What the benchmark does inside each worker process (one process per rank).

All configurations of one comparison live in the same processes at once, and they take turns
step by step: round 1 runs one step of each, round 2 another, and so on, each round in a fresh
order (what ran just before a step can slow it, e.g. another process's turn on the cores).
This machine's speed drifts by tens of percent over seconds, so only ratios within a round
are trustworthy.

Every configuration times forward + backward of one step's m micro-batches (no optimizer:
torch's `schedule.step` has none either), on rank 0, barrier to barrier:

    reference    one process runs all layers over the m micro-batches, one after another
                 (rank 0 alone; the other ranks wait). The textbook ideal is built on it.
    contention   every rank runs its own stages' work for all m micro-batches at once, with no
                 communication and no waiting: what this machine allows when p busy processes
                 share it. The contention-aware ideal is built on it.
    minipipe     minipipe's executor on the schedule
    torch        torch.distributed.pipelining's schedule on the same stages, in these processes
                 (pinned, minipipe's allocator setting), or `shipped`: in torch's own processes
                 under torchrun, as its users run it (bench/shipped.py); those time themselves
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from ..engine.config import Plan
from ..engine.execute import Executor
from ..engine.partition import stage_module
from ..engine.rank_stages import build_stages
from ..engine.workers import Job
from ..models.catalog import task_of


@dataclass(frozen=True)
class Config:
    what: str  # reference | contention | minipipe | torch
    plan: Plan  # its schedule, partition and model
    trace: bool = True  # minipipe: record events (every round's come back)
    shipped: bool = False  # torch: in its own processes, launched by torchrun

    @property
    def label(self) -> str:
        s = self.plan.schedule
        if self.what in ("reference", "contention"):
            return self.what + (f" (v={s.v})" if self.what == "contention" and s.v > 1 else "")
        return (
            f"{self.what} {s.kind}" + ("" if self.trace else " (untraced)") + (" (as shipped)" if self.shipped else "")
        )


@dataclass
class Comparison:
    """One job for the workers: configurations that take turns for `rounds` rounds."""

    configs: list[Config]
    rounds: int = 10
    warmup: int = 2
    name: str = ""
    meta: dict = field(default_factory=dict)
    torch_port: int | None = None  # the store of torch's own processes (shipped configurations)

    def job(self) -> Job:
        """For the workers: on the CPU, each rank pinned to a core of its own as minipipe's runs are."""
        plans = [c.plan for c in self.configs]
        return Job(
            self,
            plans[0].backend,
            pin_cores=True,
            timeout=max(pl.config.timeout for pl in plans),
            startup_timeout=max(pl.config.startup_timeout for pl in plans),
        )


@dataclass
class RankTimes:
    """What one rank measured in a comparison."""

    rank: int
    ms: dict[str, list[float]]  # per configuration's label: step ms in each round (rank 0's count)
    records: dict[str, list]  # per traced minipipe configuration: this rank's StepRecord of each round


def run_comparison(job: Comparison, rank: int, report, status) -> RankTimes:
    torch.set_num_threads(job.configs[0].plan.config.threads)
    steps = [_build(c, rank, job) for c in job.configs]
    ms = {c.label: [] for c in job.configs}
    records = {}
    order = list(range(len(job.configs)))
    for round_ in range(job.warmup + job.rounds):
        random.Random(round_).shuffle(order)  # the same order on every rank; no config always follows another
        for index in order:
            config, step_fn = job.configs[index], steps[index]
            status(round_, index, "compute")  # the launcher's watchdog sees the bench move
            dist.barrier()
            t0 = time.perf_counter()
            out = step_fn(round_)
            dist.barrier()
            if round_ >= job.warmup:
                ms[config.label].append(out if config.shipped else 1000 * (time.perf_counter() - t0))
                if config.what == "minipipe" and config.trace:
                    records.setdefault(config.label, []).append(out)
        report("round", {"round": round_, "of": job.warmup + job.rounds, "name": job.name})
    return RankTimes(rank, ms, records)


def _build(config: Config, rank: int, job: Comparison):
    if config.shipped:
        return _shipped(config, rank, job)
    c = config.plan.config
    task = task_of(c)
    return {"reference": _reference, "contention": _contention, "minipipe": _minipipe, "torch": _torch}[config.what](
        config, rank, task
    )


def _batches(task, m, step):
    x, y = task.batch(step)
    return x.chunk(m), y.chunk(m)


def _reference(config, rank, task):
    if rank != 0:
        return lambda step: None
    model = nn.Sequential(*task.layers())
    m = config.plan.schedule.m

    def step_fn(step):
        model.zero_grad(set_to_none=True)
        xs, ys = _batches(task, m, step)
        for x, y in zip(xs, ys):
            (task.loss(model(x), y) / m).backward()

    return step_fn


def _contention(config, rank, task):
    plan = config.plan
    stages = build_stages(plan, rank, task, torch.device("cpu"))
    m = plan.schedule.m
    inputs = {s: torch.randn(plan.shapes[s - 1][0]) for s in stages if s > 0}  # made once: no comm
    grads = {s: torch.ones(plan.shapes[s][0]) for s in stages if s < plan.schedule.n_stages - 1}

    def step_fn(step):
        xs, ys = _batches(task, m, step)
        for s, st in stages.items():
            st.module.zero_grad(set_to_none=True)
            for mb in range(m):
                st.forward(mb, xs[mb] if st.is_first else inputs[s], ys[mb] if st.is_last else None)
                st.backward(mb, grads.get(s))
            st.reset_step()

    return step_fn


def _minipipe(config, rank, task):
    plan = config.plan
    device = torch.device("cpu")
    stages = build_stages(plan, rank, task, device)
    executor = Executor(
        rank,
        plan.schedule,
        stages,
        plan.shapes,
        device,
        plan.in_order,
        plan.timeout,
        clock=time.perf_counter,
        trace=config.trace,
    )
    m = plan.schedule.m
    first = any(st.is_first for st in stages.values())
    last = any(st.is_last for st in stages.values())

    def step_fn(step):
        for st in stages.values():
            st.module.zero_grad(set_to_none=True)
        xs, ys = _batches(task, m, step)
        return executor.step(step, list(xs) if first else None, list(ys) if last else None)

    return step_fn


def _shipped(config, rank, job):
    if rank != 0:
        return lambda step: None
    from .shipped import ShippedClient

    client = ShippedClient(job.torch_port, config.plan.timeout)
    s = config.plan.schedule
    return lambda step: client.step(job.meta["spec"], s.kind, s.m, step)


def _torch(config, rank, task):
    from .torch_pp import TorchPipeline

    plan = config.plan
    layers = task.layers()
    mine = {s: stage_module(layers, plan.partition, s) for s in plan.schedule.stages_of(rank)}
    pipe = TorchPipeline(plan.schedule.kind, mine, plan.schedule.n_stages, plan.schedule.m, task.loss)

    def step_fn(step):
        x, y = task.batch(step)
        pipe.step(x, y)

    return step_fn
