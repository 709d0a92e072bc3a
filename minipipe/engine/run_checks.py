"""Every check on a run that can be made before a process starts, training or serving.

`check_engine` checks what every run shares (the model's arguments, timeouts, threads, where the
ranks run and how they match messages); training adds its own (`check_training`: the batch, the
buckets, the steps, the optimizer; `check_checkpoint`: what a resume would load; `sendable_step`:
your own F and B). config.prepare calls them for training, serve/plan.py's prepare for serving.
Each raises a ValueError that says what to change.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import torch

from ..models.custom import Sendable, check_model_args, sendable
from ..outputs import writable_folder
from ..schedule.ir import Schedule
from . import checkpoint, manifest
from .placement import Placement, place, visible_gpus

if TYPE_CHECKING:
    from .config import EngineConfig, RunConfig

OPTIMIZERS = ("adam", "sgd")


def check_engine(c: EngineConfig, local_ranks: int) -> tuple[EngineConfig, Placement]:
    """The shared fields, checked: timeouts, threads, where the `local_ranks` ranks of this
    machine run (device, backend, cores) and how they match messages. Returns the config with
    its model made sendable (a function or class travels to the workers by value) and the
    placement; raises ValueError."""
    c = c.replace(model=sendable(c.model))
    check_model_args(c.model_args)
    check_timeouts(c)
    if isinstance(c.threads, bool) or not isinstance(c.threads, int) or c.threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {c.threads!r}")
    for key in ("pin_cores", "oversubscribe"):
        if not isinstance(getattr(c, key), bool):
            raise ValueError(f"{key} must be True or False, got {getattr(c, key)!r}")
    if c.fault is not None and not isinstance(c.fault, dict):
        raise ValueError(
            f"fault is a test hook, a dict such as {{'rank': 1, 'action': '1F2', 'kind': 'raise'}}; "
            f"got {type(c.fault).__name__}"
        )
    where = place(local_ranks, visible_gpus(), c.device, c.backend)
    if where.device == "cpu":
        check_cores(local_ranks, c.oversubscribe)
    if where.backend == "nccl" and not torch.distributed.is_nccl_available():
        raise ValueError("this torch build has no NCCL; use backend='gloo'")
    if c.message_order not in ("auto", "issue", "tag"):
        raise ValueError(f"unknown message_order {c.message_order!r}; choose auto, issue or tag")
    if c.message_order == "tag" and where.backend != "gloo":
        raise ValueError(
            f"message_order='tag' needs gloo, which matches messages by tag; {where.backend} matches "
            f"them in issue order: use message_order='auto'"
        )
    return c, where


def check_training(c: RunConfig) -> None:
    """Training's own numbers: the batch's split, the gradient buckets, the steps, the optimizer."""
    check_batch(c)
    if (
        not isinstance(c.dp_overlap, bool)
        or isinstance(c.dp_bucket_bytes, bool)
        or not isinstance(c.dp_bucket_bytes, int)
        or c.dp_bucket_bytes < 1
    ):
        raise ValueError(
            f"dp_overlap must be True or False and dp_bucket_bytes a whole number >= 1; "
            f"got {c.dp_overlap!r}, {c.dp_bucket_bytes!r}"
        )
    if isinstance(c.steps, bool) or not isinstance(c.steps, int) or c.steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {c.steps!r}")
    if c.trace_steps is not None and (
        isinstance(c.trace_steps, bool) or not isinstance(c.trace_steps, int) or c.trace_steps < 0
    ):
        raise ValueError(
            f"trace_steps is how many of the last steps keep their traces: a whole number >= 0 (0: none) "
            f"or None (all); got {c.trace_steps!r}"
        )
    for key in ("return_grads", "dp_overlap"):
        if not isinstance(getattr(c, key), bool):
            raise ValueError(f"{key} must be True or False, got {getattr(c, key)!r}")
    if c.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {c.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if isinstance(c.lr, bool) or not isinstance(c.lr, (int, float)) or not (math.isfinite(c.lr) and c.lr > 0):
        raise ValueError(f"lr must be a finite number > 0 (e.g. 3e-3), got {c.lr!r}")


def sendable_step(step, schedule: Schedule):
    """A stage_step hook travels to the workers by value, as your own model does."""
    if step is None or isinstance(step, Sendable):
        return step
    if not callable(step):
        raise ValueError(f"stage_step must be a function stage_step(stage, baton), got {type(step).__name__}")
    if schedule.splits_backward():
        raise ValueError(
            f"stage_step replaces F and B, but the {schedule.kind} schedule splits backward into I and W; "
            f"use a schedule with whole backwards (gpipe, 1f1b, interleaved)"
        )
    try:
        return Sendable(step)
    except ValueError as e:
        raise ValueError(f"stage_step: {e}") from None


def check_sizes(c: RunConfig) -> None:
    """Before anything is built: p, m, dp, tp and the batch are whole numbers, and m fits the batch
    (a micro-batch of no rows cannot be), so that no size the run cannot have builds a schedule."""
    for key, what in (
        ("p", "ranks"),
        ("m", "micro-batches"),
        ("dp", "data-parallel replicas"),
        ("tp", "tensor-parallel shards"),
        ("batch_size", "rows of a step's batch"),
    ):
        value = getattr(c, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} ({what}) must be a whole number >= 1, got {value!r}")
    if c.m * c.dp > c.batch_size:
        most = c.batch_size // c.dp
        raise ValueError(
            f"m={c.m} micro-batches of batch_size={c.batch_size} rows"
            + (f" shared by dp={c.dp} replicas" if c.dp > 1 else "")
            + f": a micro-batch would hold less than one row; use m <= {most}"
            + (" (or a smaller dp)" if c.dp > 1 else "")
            + ", or a larger batch_size"
        )
    check_batch(c)


def check_batch(c: RunConfig) -> None:
    """Each of the dp replicas takes batch_size/dp rows, cut into m equal micro-batches."""
    n = c.dp * c.m
    if c.batch_size % n:
        lo, hi = c.batch_size // n * n, (c.batch_size // n + 1) * n
        who = f"m={c.m} equal micro-batches" if c.dp == 1 else f"dp={c.dp} replicas × m={c.m} equal micro-batches"
        raise ValueError(
            f"batch_size={c.batch_size} does not split into {who}; use batch_size={lo or hi}"
            + (f" or {hi}" if lo else "")
            + f" (a multiple of {'m' if c.dp == 1 else 'dp·m'} = {n})"
        )


RANKS_PER_CORE = 4  # beyond this the ranks mostly wait for a core, and timeouts fire for no reason


def check_cores(ranks: int, oversubscribe: bool) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if ranks > RANKS_PER_CORE * cores and not oversubscribe:
        raise ValueError(
            f"{ranks} processes (p·dp·cp·tp) on a machine with {cores} CPU core{'s' if cores > 1 else ''}: "
            f"more than {RANKS_PER_CORE} per core, so they would mostly wait for a turn on a core and "
            f"every time measured would mean little. Use at most {RANKS_PER_CORE * cores} "
            f"(smaller p, dp, cp or tp), or pass oversubscribe=True (--oversubscribe) to run anyway"
        )


def check_checkpoint(c: RunConfig, param_shapes: dict) -> tuple[str | None, str | None]:
    """The checkpoint to resume from (None: start at step 0) and what to tell the user about it."""
    if isinstance(c.checkpoint_every, bool) or not isinstance(c.checkpoint_every, int) or c.checkpoint_every < 0:
        raise ValueError(
            f"checkpoint_every must be a whole number >= 0 (0: only at the end), got {c.checkpoint_every!r}"
        )
    if not isinstance(c.resume, bool):
        raise ValueError(f"resume must be True or False, got {c.resume!r}")
    if c.checkpoint_dir == "":
        raise ValueError("checkpoint_dir is '': give a folder to save in, or None for no checkpoints")
    if not c.checkpoint_dir:
        if c.resume:
            raise ValueError("resume=True needs checkpoint_dir: the folder the earlier run saved to")
        return None, None
    root = c.checkpoint_dir
    writable_folder(root, "checkpoint_dir")
    found = checkpoint.steps(root)
    if not c.resume:
        if found or os.path.exists(os.path.join(root, checkpoint.LATEST)):
            names = ", ".join(os.path.basename(p) for p in found[:3]) + (", ..." if len(found) > 3 else "")
            raise ValueError(
                f"{root!r} already holds checkpoints ({names or 'its latest pointer'}); pass resume=True "
                f"to continue from the newest, or choose an empty checkpoint_dir (nothing saved is "
                f"overwritten)"
            )
        return None, None
    if not found:
        return None, f"resume: {root!r} holds no checkpoint yet, so training starts at step 0"
    path, skipped = checkpoint.newest(root)
    if path is None:
        raise checkpoint.CheckpointError(
            f"no intact checkpoint in {root!r}: "
            + "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped)
            + ". Nothing was started; repair or remove the damaged folders, or choose another checkpoint_dir"
        )
    meta = checkpoint.check_matches(path, param_shapes)
    for key in ("seed", "batch_size"):
        if meta[key] != getattr(c, key):
            raise ValueError(
                f"the checkpoint was saved with {key}={meta[key]}, this run has {key}={getattr(c, key)}; "
                f"resume with the same {key} (the data of each step depends on it)"
            )
    if meta["step"] >= c.steps:
        raise ValueError(
            f"the checkpoint is already at step {meta['step']} and steps={c.steps}: nothing to train; "
            f"raise steps above {meta['step']}"
        )
    notes = [manifest.unverified(path, meta)]
    if skipped:
        notes.insert(
            0,
            f"resuming from {os.path.basename(path)}, the newest intact checkpoint in {root!r}; skipped "
            f"as damaged (left as they are; a save over one sets it aside as .damaged): "
            + "; ".join(f"{os.path.basename(p)} ({why})" for p, why in skipped),
        )
    return path, "\n".join(n for n in notes if n) or None


MIN_TIMEOUT = 0.01  # seconds: below this a wait measures the OS's scheduling, not a peer
MIN_STARTUP_TIMEOUT = 1.0  # seconds: starting workers (a fork, joining the group) never takes less


def check_timeouts(c: EngineConfig) -> None:
    if not (isinstance(c.timeout, (int, float)) and MIN_TIMEOUT <= c.timeout < math.inf):
        raise ValueError(
            f"timeout must be at least {MIN_TIMEOUT} s, got {c.timeout!r}: it bounds one wait for a "
            f"peer's data, and a shorter one would fire whenever the OS pauses a process for a "
            f"time slice. The default, 60 s, suits the course models; use a few seconds to catch "
            f"hangs quickly"
        )
    if not (isinstance(c.startup_timeout, (int, float)) and MIN_STARTUP_TIMEOUT <= c.startup_timeout < math.inf):
        raise ValueError(
            f"startup_timeout must be at least {MIN_STARTUP_TIMEOUT:g} s, got {c.startup_timeout!r}: "
            f"starting the ranks (processes, joining the process group, building the model) takes "
            f"seconds. The default is 300 s"
        )


def check_no_flush(c, schedule: Schedule) -> None:
    """What a run without a flush (no_flush.py) cannot take; raises ValueError saying what to change."""
    kind = schedule.kind
    needs = [
        (c.dp != 1, f"dp={c.dp}: a data-parallel all-reduce at the end of a step, and there is no end; use dp=1"),
        (c.cp != 1, f"cp={c.cp}: context parallelism, whose gradients are averaged at the end of a step; use cp=1"),
        (c.tp != 1, f"tp={c.tp}: tensor parallelism, which minipipe runs on flushed steps only; use tp=1"),
        (
            _recomputes(c.recompute),
            f"recompute={c.recompute}: recomputation, which minipipe runs on flushed steps only; leave recompute out",
        ),
        (c.stage_step is not None, "stage_step: your own F and B; weight stashing needs minipipe's own"),
        (
            bool(c.checkpoint_dir) or c.resume,
            "checkpoint_dir or resume: a checkpoint is taken at a step boundary "
            "where every stage holds one weight version, which this run never "
            "has (and a resumed run would begin with a flush)",
        ),
        (c.return_grads, "return_grads: a step's gradients, which are spread over several updates here"),
        (schedule.splits_backward(), "a backward split into I and W: weight stashing here runs whole backwards (B)"),
    ]
    wrong = [why for bad, why in needs if bad]
    if wrong:
        raise ValueError(f"the {kind} schedule has no flush between steps, so it cannot take " + "; ".join(wrong))
    if schedule.steps != c.steps:
        raise ValueError(
            f"the {kind} schedule holds {schedule.steps} steps, but steps={c.steps} was given; give the "
            f"schedule's steps, or leave steps out"
        )


def _recomputes(option) -> bool:
    """recompute as given (a string, layer indices) or parsed (sim.recompute_costs.Recompute)."""
    return getattr(option, "on", option not in (None, False, "none", [], ()))
