"""Many machines: `torchrun ... -m minipipe train ...` runs this in every process.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; we join the process group from those, let rank 0 plan the run
(so a time-profiled partition is the same everywhere), train, and gather the results on rank 0.

Restarts (torchrun --max-restarts N): when a worker dies, torchrun stops every worker on every
node and starts them all again. A run given a checkpoint folder and resume (`--checkpoint-dir D
--checkpoint-every K --resume`) starts at step 0 in an empty folder and, each time it is started
again, resumes from the newest intact checkpoint there (global rank 0 holds the folder's lock;
the dead attempt's went with its process). TORCHELASTIC_RESTART_COUNT says which attempt this is.

A test hook: MINIPIPE_FAULT='{"rank": 1, "step": 5, "action": "1F2", "kind": "kill", "attempt": 0}'
is RunConfig.fault for the attempt it names (default the first), so a test kills a worker at a
chosen point once, not at every restart.
"""
from __future__ import annotations

import contextlib
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import RunConfig, prepare
from .folder_lock import holding
from .launch import collect
from .train import train_rank
from .workers import group_timeout, tell


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def run_torchrun(config: RunConfig, progress=None):
    """Train as one of torchrun's processes; returns the RunResult on rank 0, None elsewhere."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    wanted = config.p * config.dp * config.tp
    if world != wanted:
        raise ValueError(f"torchrun started {world} processes but the run asks for p·dp·tp = {config.p}·{config.dp}·"
                         f"{config.tp} = {wanted}; start {wanted} processes in all (nnodes × nproc-per-node), or "
                         f"change -p, --dp or --tp so that their product is {world}")
    config = config.replace(fault=injected_fault(config.fault))
    # every process plans (and so fails on bad input) before joining; rank 0's plan then wins,
    # so a partition measured by time is the same everywhere
    local_rank = int(os.environ["LOCAL_RANK"])
    plan = prepare(config, local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    with holding([plan]) if rank == 0 else contextlib.nullcontext():     # the checkpoint folder is this run's
        return _train(plan, rank, world, local_rank, progress)


def _train(plan, rank: int, world: int, local_rank: int, progress):
    config = plan.config
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


def injected_fault(given: dict | None) -> dict | None:
    """RunConfig.fault, or MINIPIPE_FAULT's for this attempt (see the module docstring): one fault
    or a list of them, each for the attempt it names."""
    text = os.environ.get("MINIPIPE_FAULT")
    if not text:
        return given
    example = '{"rank": 1, "step": 5, "kind": "kill", "attempt": 0}'
    try:
        faults = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"MINIPIPE_FAULT is not JSON ({e}); it is a test hook such as {example}") from None
    faults = faults if isinstance(faults, list) else [faults]
    if not all(isinstance(f, dict) for f in faults):
        raise ValueError(f"MINIPIPE_FAULT must be a JSON object such as {example}, or a list of them; "
                         f"got {text[:80]!r}")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    mine = [f for f in faults if f.get("attempt", 0) == attempt]
    return {k: v for k, v in mine[0].items() if k != "attempt"} if mine else given
