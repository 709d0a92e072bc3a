"""`minipipe bench` on 4 processes: data and tensor parallelism, ours in the open against torch's.

    unsplit             rank 0 alone runs the whole model over the m micro-batches (the others wait)
    minipipe DP4        4 replicas, a quarter of the batch each, gradients averaged by our bucketed
                        all-reduce (DDP's bucket size) started during the backward (parallel/data.py) ...
    ... after backward  ... or all of it after the backward (what overlap buys)
    torch DDP4          DistributedDataParallel on the same model and data (no_sync for m-1 micro-batches)
    minipipe TP4        every layer split 4 ways (parallel/tensor.py)
    torch TP4           torch.distributed.tensor.parallel: each layer's Linear ColwiseParallel, its output
                        gathered (Replicate), the same split as ours for the MLP

As in the pipeline benchmark (bench/jobs.py), the configurations take turns step by step in one
group of processes, each round in a fresh order, and only ratios within a round are compared.
Each times forward + backward of one step (gradients averaged where there are replicas), no
optimizer, barrier to barrier on rank 0.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from ..engine import workers
from ..engine.config import RunConfig, prepare
from ..engine.train import RankStep
from ..models.catalog import task_of

WORLD = 4
SIZE = dict(model="mlp", model_args={"width": 1024, "depth": 7}, batch_size=64, m=4)
QUICK_SIZE = dict(model="mlp", model_args={"width": 128, "depth": 3}, batch_size=16, m=2)
# DDP's own bucket size (bucket_cap_mb=25), so that both send buckets of one size; minipipe's default
# (traffic.DEFAULT_BUCKET_BYTES, 32 KiB) is small so that the course's small models fill several: on
# this model it makes 16 all-reduces a step, at 25 MiB 2
DDP_BUCKET_BYTES = 25 * 1024 * 1024
NAMES = ("unsplit", "minipipe DP4", "minipipe DP4 (after backward)", "torch DDP4", "minipipe TP4", "torch TP4")


@dataclass
class MeshJob:
    size: dict
    rounds: int
    warmup: int
    plans: dict = field(default_factory=dict)  # name -> Plan, for minipipe's configurations


def mesh_job(quick: bool = False, rounds: int | None = None) -> MeshJob:
    size = dict(QUICK_SIZE if quick else SIZE)
    base = dict(schedule="1f1b", p=1, threads=1, timeout=120, device="cpu", **size)
    dp = dict(dp=WORLD, dp_bucket_bytes=DDP_BUCKET_BYTES)
    plans = {
        "minipipe DP4": prepare(RunConfig(**dp, **base)),
        "minipipe DP4 (after backward)": prepare(RunConfig(**dp, dp_overlap=False, **base)),
        "minipipe TP4": prepare(RunConfig(tp=WORLD, **base)),
    }
    return MeshJob(size, rounds or (1 if quick else 12), 1 if quick else 2, plans)


def run_mesh(job: MeshJob, rank: int, report, status) -> dict:
    """Every rank's body: build each configuration, then rounds of one step each."""
    torch.set_num_threads(1)
    config = RunConfig(**job.size)
    steps = {"unsplit": _unsplit(config, rank), "torch DDP4": _ddp(config, rank), "torch TP4": _torch_tp(config, rank)}
    ours = {name: RankStep(plan, rank, trace=False) for name, plan in job.plans.items()}
    for me in ours.values():
        me.start()
    steps.update({name: (lambda step, me=me: me.step(step)) for name, me in ours.items()})
    ms = {name: [] for name in NAMES}
    overlap = []
    order = list(NAMES)
    for round_ in range(job.warmup + job.rounds):
        random.Random(round_).shuffle(order)  # the same order on every rank
        for index, name in enumerate(order):
            status(round_, index, "compute")
            dist.barrier()
            t0 = time.perf_counter()
            steps[name](round_)
            dist.barrier()
            if round_ >= job.warmup:
                ms[name].append(1000 * (time.perf_counter() - t0))
                if name == "minipipe DP4":
                    overlap.append(ours[name].reducer.overlap_fraction())
        report("round", {"round": round_, "of": job.warmup + job.rounds, "name": "data and tensor parallelism"})
    for me in ours.values():
        me.close()
    return {"ms": ms, "overlap": overlap}


def _microbatches(task, config, step, replicas: int, index: int):
    x, y = task.batch(step)
    x, y = x.chunk(replicas)[index], y.chunk(replicas)[index]
    return list(zip(x.chunk(config.m), y.chunk(config.m)))


def _unsplit(config, rank):
    if rank != 0:
        return lambda step: None
    task = task_of(config)
    model = nn.Sequential(*task.layers())

    def step_fn(step):
        model.zero_grad(set_to_none=True)
        for x, y in _microbatches(task, config, step, 1, 0):
            (task.loss(model(x), y) / config.m).backward()

    return step_fn


def _ddp(config, rank):
    from torch.nn.parallel import DistributedDataParallel

    task = task_of(config)
    model = DistributedDataParallel(nn.Sequential(*task.layers()))

    def step_fn(step):
        model.zero_grad(set_to_none=True)
        pieces = _microbatches(task, config, step, WORLD, rank)
        for i, (x, y) in enumerate(pieces):
            if i < len(pieces) - 1:
                with model.no_sync():
                    (task.loss(model(x), y) / config.m).backward()
            else:
                (task.loss(model(x), y) / config.m).backward()

    return step_fn


def _torch_tp(config, rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    task = task_of(config)
    model = nn.Sequential(*task.layers())
    mesh = init_device_mesh("cpu", (WORLD,))
    plan = {
        f"{i}.linear": ColwiseParallel(output_layouts=Replicate())
        for i, layer in enumerate(model)
        if type(layer).__name__ == "ResidualLinear"
    }
    parallelize_module(model, mesh, plan)

    def step_fn(step):
        model.zero_grad(set_to_none=True)
        for x, y in _microbatches(task, config, step, 1, 0):
            (task.loss(model(x), y) / config.m).backward()

    return step_fn


def run_mesh_bench(quick: bool = False, rounds: int | None = None, progress=None) -> dict:
    job = mesh_job(quick, rounds)
    results = workers.launch([workers.Job(job, timeout=120, pin_cores=True)], WORLD, run_mesh, progress)
    return {"size": job.size, **results[(0, 0)]}


def mesh_report(result: dict) -> str:
    ms, size = result["ms"], result["size"]
    n = len(ms["unsplit"])

    def ratio(a: str, b: str) -> str:
        values = [ms[a][i] / ms[b][i] for i in range(n)]
        if len(values) < 4:
            return f"{statistics.median(values):.2f}"
        q1, med, q3 = statistics.quantiles(values, n=4)
        return f"{med:.2f} [{q1:.2f}-{q3:.2f}]"

    lines = [
        f"\n== data and tensor parallelism: mlp {size['model_args']}, batch {size['batch_size']}, m={size['m']}, "
        f"{WORLD} processes (gloo, 1 thread each), {n} rounds ==",
        f"{'':32}{'ms/step':>9}  {'/ unsplit':>16}",
    ]
    for name in NAMES:
        lines.append(f"{name:<32}{statistics.median(ms[name]):9.2f}  {ratio(name, 'unsplit'):>16}")
    lines += [
        f"minipipe DP4 / torch DDP4: {ratio('minipipe DP4', 'torch DDP4')}   "
        f"after backward / overlapped: {ratio('minipipe DP4 (after backward)', 'minipipe DP4')}",
        f"minipipe TP4 / torch TP4:  {ratio('minipipe TP4', 'torch TP4')}",
        f"overlap: {statistics.median(result['overlap']):.0%} of minipipe DP4's all-reduce time ran before "
        f"the backward ended (median over rounds)",
    ]
    return "\n".join(lines)
