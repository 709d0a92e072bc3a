"""What each benchmark job does inside a worker process (one process per rank).

Every job times forward + backward of one step's m micro-batches (no optimizer: torch's
`schedule.step` has none either), over `warmup + steps` steps, and returns rank 0's step times:

    reference    one process runs all layers over the m micro-batches, one after another
                 (rank 0 alone; the other ranks wait). The textbook ideal is built on it.
    contention   every rank runs its own stages' work for all m micro-batches at once, with no
                 communication and no waiting: what this machine allows when p busy processes
                 share it. The contention-aware ideal is built on it.
    minipipe     minipipe's executor on the schedule
    torch        torch.distributed.pipelining's schedule on the same stages

Pipelined step times are measured barrier to barrier on rank 0, so they include one barrier.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..comm import message_plan
from ..config import Plan
from ..execute import Executor
from ..models import make_task
from ..train import build_stages


@dataclass
class BenchJob:
    what: str                   # reference | contention | minipipe | torch
    plan: Plan                  # schedule, partition and model of the run being measured
    steps: int = 5
    warmup: int = 2
    trace: bool = True          # minipipe only: record the events (and return the last step's)

    @property
    def schedule(self):
        return self.plan.schedule if self.what == "minipipe" else None

    @property
    def backend(self):
        return self.plan.backend

    @property
    def device(self):
        return self.plan.device

    @property
    def timeout(self):
        return self.plan.timeout

    @property
    def label(self) -> str:
        s = self.plan.schedule
        if self.what in ("reference", "contention"):
            return self.what
        return f"{self.what} {s.kind}" + ("" if self.trace else " (untraced)")


def run_job(job: BenchJob, rank: int, report, status) -> dict:
    torch.set_num_threads(job.plan.config.threads)
    c, s = job.plan.config, job.plan.schedule
    task = make_task(c.model, batch_size=c.batch_size, seed=c.seed, **c.model_args)
    step_fn = {"reference": _reference, "contention": _contention, "minipipe": _minipipe,
               "torch": _torch}[job.what](job, rank, task)
    times, last = [], None
    for step in range(job.warmup + job.steps):
        dist.barrier()
        t0 = time.perf_counter()
        last = step_fn(step)
        if job.what != "reference":
            dist.barrier()
        times.append(1000 * (time.perf_counter() - t0))
    if job.what == "reference":
        dist.barrier()
    report("job", {"label": job.label})
    return {"rank": rank, "ms": times[job.warmup:], "record": last if job.what == "minipipe" else None}


def _batches(task, m, step):
    x, y = task.batch(step)
    return x.chunk(m), y.chunk(m)


def _reference(job, rank, task):
    if rank != 0:
        return lambda step: None
    model = nn.Sequential(*task.layers())
    m = job.plan.schedule.m

    def step_fn(step):
        model.zero_grad(set_to_none=True)
        xs, ys = _batches(task, m, step)
        for x, y in zip(xs, ys):
            (task.loss(model(x), y) / m).backward()
    return step_fn


def _contention(job, rank, task):
    plan = job.plan
    stages = build_stages(plan, rank, task, torch.device("cpu"))
    m = plan.schedule.m

    def step_fn(step):
        xs, ys = _batches(task, m, step)
        for st in stages.values():
            st.module.zero_grad(set_to_none=True)
            shape, dtype = plan.shapes[st.index - 1] if not st.is_first else (None, None)
            for mb in range(m):
                x = xs[mb] if st.is_first else torch.randn(shape, dtype=dtype)
                st.forward(mb, x, ys[mb] if st.is_last else None)
                grad = None if st.is_last else torch.ones(plan.shapes[st.index][0])
                st.backward(mb, grad)
            st.reset_step()
    return step_fn


def _minipipe(job, rank, task):
    plan = job.plan
    device = torch.device("cpu")
    stages = build_stages(plan, rank, task, device)
    executor = Executor(rank, plan.schedule, stages, message_plan(plan.schedule)[rank], plan.shapes, device,
                        plan.timeout, clock=time.perf_counter, trace=job.trace)
    m = plan.schedule.m
    first = any(st.is_first for st in stages.values())
    last = any(st.is_last for st in stages.values())

    def step_fn(step):
        for st in stages.values():
            st.module.zero_grad(set_to_none=True)
        xs, ys = _batches(task, m, step)
        return executor.step(step, list(xs) if first else None, list(ys) if last else None)
    return step_fn


def _torch(job, rank, task):
    from .torch_pp import TorchPipeline

    plan = job.plan
    layers, b = task.layers(), plan.partition.bounds
    mine = {s: nn.Sequential(*layers[b[s]:b[s + 1]]) for s in plan.schedule.stages_of(rank)}
    pipe = TorchPipeline(plan.schedule.kind, mine, plan.schedule.n_stages, plan.schedule.m, task.loss)

    def step_fn(step):
        x, y = task.batch(step)
        pipe.step(x, y)
    return step_fn
