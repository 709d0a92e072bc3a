"""Many machines: `torchrun ... -m minipipe train ...` runs this in every process.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; we join the process group from those, let rank 0 plan the run
(so a time-profiled partition is the same everywhere), train, and gather the results on rank 0.
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import RunConfig, prepare
from .launch import collect
from .train import train_rank
from .workers import group_timeout, tell


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def run_torchrun(config: RunConfig, progress=None):
    """Train as one of torchrun's processes; returns the RunResult on rank 0, None elsewhere."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    wanted = config.p * config.dp * config.cp * config.tp
    if world != wanted:
        raise ValueError(f"torchrun started {world} processes but the run asks for p·dp·cp·tp = {config.p}·{config.dp}·"
                         f"{config.cp}·{config.tp} = {wanted}; start {wanted} processes in all (nnodes × "
                         f"nproc-per-node), or change -p, --dp, --cp or --tp so that their product is {world}")
    # every process plans (and so fails on bad input) before joining; rank 0's plan then wins,
    # so a partition measured by time is the same everywhere
    local_rank = int(os.environ["LOCAL_RANK"])
    plan = prepare(config, local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if plan.gpus:
        torch.cuda.set_device(plan.gpus[local_rank])
    if local_rank == 0:
        tell(plan.note, progress)      # once per machine: each has its own GPUs
    dist.init_process_group(plan.backend, timeout=timedelta(seconds=group_timeout(config.timeout,
                                                                                   config.startup_timeout)))
    try:
        box = [plan]
        dist.broadcast_object_list(box, src=0)
        plan = box[0]
        payload = train_rank(plan, rank, lambda kind, data: progress and progress({"kind": kind, **data}))
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(payload, gathered, dst=0)
        return collect(plan, gathered) if rank == 0 else None
    finally:
        dist.destroy_process_group()
