"""Many machines: `torchrun ... -m minipipe train ...` runs this in every process.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; we join the process group from those, let rank 0 plan the run
(so a time-profiled partition is the same everywhere), train, and gather the results on rank 0.

Restarts (torchrun --max-restarts N): when a worker dies, torchrun stops every worker on every
node and starts them all again. A run given a checkpoint folder and resume (`--checkpoint-dir D
--checkpoint-every K --resume`) starts at step 0 in an empty folder and, each time it is started
again, resumes from the newest intact checkpoint there (global rank 0 holds the folder's lock;
the dead attempt's went with its process). Give torchrun TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1:
with the rendezvous store shared (torch's default since 2.5) a restarted group can read the
addresses of the attempt before and fail to connect (pytorch/pytorch#135712); `run_torchrun`
refuses a run with restarts without it.

A test hook: MINIPIPE_FAULT='[{"rank": 1, "step": 5, "action": "1F2", "kind": "kill", "once": PATH}, ...]'
is RunConfig.fault for the rank it names; one with "once" fires only if PATH does not exist yet
(it makes it), so a test kills a worker at a chosen point once, not at every restart. (Not keyed
by TORCHELASTIC_RESTART_COUNT: each agent counts its own restarts, and an agent restarted because
another node's worker failed does not count it, pytorch/pytorch#135712.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import RunConfig, prepare
from .folder_lock import holding
from .launch import collect
from .rank_job import train_rank
from .workers import group_timeout, tell


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def run_torchrun(config: RunConfig, progress=None):
    """Train as one of torchrun's processes; returns the RunResult on rank 0, None elsewhere."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    wanted = config.p * config.dp * config.cp * config.tp
    if world != wanted:
        raise ValueError(
            f"torchrun started {world} processes but the run asks for p·dp·cp·tp = {config.p}·{config.dp}·"
            f"{config.cp}·{config.tp} = {wanted}; start {wanted} processes in all (nnodes × "
            f"nproc-per-node), or change -p, --dp, --cp or --tp so that their product is {world}"
        )
    injected_fault(None, rank)  # a test hook's text, checked before anything starts
    check_restarts(os.environ)
    # every process plans (and so fails on bad input) before joining; rank 0's plan then wins,
    # so a partition measured by time is the same everywhere
    local_rank = int(os.environ["LOCAL_RANK"])
    plan = prepare(config, local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    with holding([plan]) if rank == 0 else contextlib.nullcontext():  # the checkpoint folder is this run's
        return _train(plan, rank, world, local_rank, progress)


def _train(plan, rank: int, world: int, local_rank: int, progress):
    config = plan.config
    if plan.gpus:
        torch.cuda.set_device(plan.gpus[local_rank])
    if local_rank == 0:
        tell(plan.note, progress)  # once per machine: each has its own GPUs
    dist.init_process_group(
        plan.backend, timeout=timedelta(seconds=group_timeout(config.timeout, config.startup_timeout))
    )
    try:
        box = [plan]
        dist.broadcast_object_list(box, src=0)
        plan = dataclasses.replace(
            box[0], config=box[0].config.replace(fault=injected_fault(box[0].config.fault, rank))
        )
        payload = train_rank(plan, rank, lambda kind, data: progress and progress({"kind": kind, **data}))
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(payload, gathered, dst=0)
        return collect(plan, gathered) if rank == 0 else None
    finally:
        dist.destroy_process_group()


def check_restarts(env) -> None:
    """Restarts need a rendezvous store of their own per attempt (see the module docstring)."""
    restarts = int(env.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    if restarts > 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise ValueError(
            f"torchrun --max-restarts {restarts} with its rendezvous store shared with the workers: after "
            f"a restart the workers can read the addresses of the attempt before and fail to connect "
            f"(pytorch/pytorch#135712). Start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its "
            f"environment on every node (each attempt then gets a store of its own), or without "
            f"--max-restarts"
        )


def injected_fault(given: dict | None, rank: int) -> dict | None:
    """RunConfig.fault, or this rank's first MINIPIPE_FAULT not yet fired (see the module docstring)."""
    text = os.environ.get("MINIPIPE_FAULT")
    if not text:
        return given
    example = '{"rank": 1, "step": 5, "action": "1F2", "kind": "kill", "once": "/tmp/fired-1"}'
    try:
        faults = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"MINIPIPE_FAULT is not JSON ({e}); it is a test hook such as {example}") from None
    faults = faults if isinstance(faults, list) else [faults]
    if not all(isinstance(f, dict) for f in faults):
        raise ValueError(
            f"MINIPIPE_FAULT must be a JSON object such as {example}, or a list of them; got {text[:80]!r}"
        )
    mine = [f for f in faults if f.get("rank") == rank and not (f.get("once") and os.path.exists(f["once"]))]
    return mine[0] if mine else given
