"""What a run is, and every check on it that can be made before a process starts.

`RunConfig` is what a user writes to train; `prepare(config)` turns it into a `Plan` — the
validated schedule, where the model is cut, the activation shapes at each cut, the device and
backend — or raises a ValueError that says what to change. Workers only ever see a Plan.
Serving (serve/api.py) writes a ServeConfig or a GenerateConfig: the fields every run shares
are `EngineConfig`'s, declared and checked here once (`check_engine`, `cut_model`), and a
serving plan is a Plan too, with its stream or generation in `Plan.work`.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..models.catalog import task_of
from ..models.custom import Sendable, check_model_args, describe_model, sendable
from ..outputs import writable_folder
from ..parallel.mesh import Mesh
from ..parallel.tensor import check_tensor_parallel
from ..schedule.ir import Schedule
from ..schedule.kinds import get as kind_named
from ..schedule.kinds import make_schedule
from ..schedule.validate import validate
from ..sim.recompute import parse as parse_recompute
from ..traffic import DEFAULT_BUCKET_BYTES
from . import checkpoint
from .partition import Partition, check_not_shared, partition
from .placement import Placement, place, visible_gpus

OPTIMIZERS = ("adam", "sgd")


class Default(int):
    """A default that knows it was not given: a hand-written schedule's own p and m replace it,
    while a p or m the user gave and the schedule contradicts is refused (_check_given)."""


@dataclass(kw_only=True)
class EngineConfig:
    """What every run on the engine shares, training or serving: the model, how it is cut and
    scheduled, where its processes run, how long a wait may take. RunConfig adds training's own
    fields, serve.api's ServeConfig and GenerateConfig serving's; `check_engine` and `cut_model`
    check these once for all of them."""

    schedule: str | Schedule = "1f1b"   # naive | gpipe | 1f1b | interleaved | ... | inference, or your own Schedule
    p: int = Default(2)             # pipeline ranks (processes of one model copy)
    v: int | None = None            # stages per rank; default: the kind's own (2 for interleaved, else 1)
    tp: int = 1                     # tensor-parallel shards of every layer (parallel/tensor.py)
    model: str | Callable = "mlp"   # mlp | gpt | "package.module:function" | your own function or class (custom.py)
    model_args: dict = field(default_factory=dict)   # e.g. {"width": 64, "depth": 8}
    seed: int = 0
    partition: str = "uniform"      # uniform | params | time
    recompute: object = "none"      # none | stage (each stage's forward again in its backward) | [layer indices]
                                    # (sim/recompute.py: what each keeps and costs; engine/recompute.py)
    device: str = "auto"            # auto (the GPUs when any are visible, shared when fewer than ranks) | cpu | cuda
    backend: str = "auto"           # auto | gloo | nccl
    timeout: float = 60.0           # seconds any one wait for a peer may take, inside a step
    startup_timeout: float = 300.0  # seconds the ranks may take to start: find each other, build, load
    threads: int = 1                # torch threads per rank
    pin_cores: bool = True          # each rank on a free core of its own (engine/cores.py), when there are enough
    oversubscribe: bool = False     # allow more processes than this machine's cores can sensibly host
    message_order: str = "auto"     # auto | issue | tag: how the ranks match messages (see comm.py);
                                    # "issue" runs NCCL's in-order matching on gloo, to check it on CPU
    fault: dict | None = None       # test hook: {"rank": 1, "step": 0, "action": "1F2", "kind": "raise"}

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass(kw_only=True)
class RunConfig(EngineConfig):
    """A training run. world = p · dp · tp processes, placed on a mesh (mesh.py)."""

    m: int = Default(4)             # micro-batches per step
    dp: int = 1                     # data-parallel replicas, each its own share of the batch (parallel/data.py)
    dp_overlap: bool = True         # start the gradient all-reduces during the backward (as DDP); False: after it
    dp_bucket_bytes: int = DEFAULT_BUCKET_BYTES   # gradient bytes per all-reduce
    batch_size: int = 32
    steps: int = 10
    optimizer: str = "adam"
    lr: float = 3e-3
    trace_steps: int | None = None  # keep the traces of the last N steps (None: all)
    return_grads: bool = False      # also return the gradients of the first step (for tests)
    checkpoint_dir: str | None = None   # save here (see checkpoint.py)
    checkpoint_every: int = 0           # steps between checkpoints; 0: only after the last step
    resume: bool = False                # continue from the newest checkpoint in checkpoint_dir, if any
    stage_step: Callable | None = None   # your own F and B: stage_step(stage, baton) (baton.py; exercise 08)


@dataclass
class Plan:
    """A run worked out and checked, training or serving: all the workers ever see."""

    config: EngineConfig
    schedule: Schedule
    partition: Partition
    shapes: list            # shapes[k] = (shape, dtype) of stage k's output for one micro-batch; where
                            # they change with the micro-batch (generation), a function of the producer
    device: str             # "cpu" or "cuda"
    backend: str            # "gloo" or "nccl"
    resume_from: str | None = None   # checkpoint folder to load before the first step
    meta: dict = field(default_factory=dict)   # what a checkpoint records about the run
    gpus: tuple[int, ...] = ()       # local rank r on CUDA device gpus[r]; () on the CPU (placement.place)
    note: str | None = None          # what the run tells the user once: where it runs, what it resumes
    where: str = "on the CPU (gloo)"  # where the ranks run, in a few words (placement.Placement.label)
    mesh: Mesh = Mesh()              # pp = p, dp, tp: where each process sits
    layer_shapes: list = field(default_factory=list)   # (shape, dtype) of each layer's input, one micro-batch
    state: dict | None = None        # weights to load into the stages (serving); None: the seed's
    work: Any = None                 # what a serving run adds (serve/work.py): its stream, or its generation

    @property
    def world(self) -> int:
        return self.mesh.world

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def pin_cores(self) -> bool:
        return self.config.pin_cores and self.device == "cpu"

    @property
    def in_order(self) -> bool:
        """Messages are issued in one agreed order per pair of ranks (NCCL needs it), rather than
        matched by tag (gloo)."""
        order = self.config.message_order
        return order == "issue" or (order == "auto" and self.backend != "gloo")


def resolve_v(config: EngineConfig) -> int:
    if config.v is not None:
        return config.v
    if isinstance(config.schedule, Schedule):
        return config.schedule.v
    return kind_named(config.schedule).default_v


def prepare(config: RunConfig, local_ranks: int | None = None) -> Plan:
    """Validate everything and work out the run; raises ValueError before any process starts.
    `local_ranks` is how many ranks share this machine (default: all p·dp·tp)."""
    if not isinstance(config, RunConfig):
        raise ValueError(f"expected a RunConfig, got {type(config).__name__}")
    c = config
    if isinstance(c.schedule, Schedule):   # a hand-written schedule brings its own p, m and v
        schedule = validate(c.schedule)
        _check_given(c, schedule)
        c = c.replace(p=schedule.p, m=schedule.m, v=schedule.v)
    else:
        schedule = make_schedule(c.schedule, c.p, c.m, resolve_v(c))
    if schedule.forward_only:
        raise ValueError(f"the {schedule.kind} schedule is forward only: it serves (minipipe.serve.api), it does not "
                         f"train; choose one with a backward, e.g. 1f1b")
    c = c.replace(stage_step=_sendable_step(c.stage_step, schedule))
    mesh = Mesh(c.p, c.dp, c.tp)
    _check_batch(c)
    if not isinstance(c.dp_overlap, bool) or isinstance(c.dp_bucket_bytes, bool) \
            or not isinstance(c.dp_bucket_bytes, int) or c.dp_bucket_bytes < 1:
        raise ValueError(f"dp_overlap must be True or False and dp_bucket_bytes a whole number >= 1; "
                         f"got {c.dp_overlap!r}, {c.dp_bucket_bytes!r}")
    if not isinstance(c.steps, int) or c.steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {c.steps!r}")
    if c.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {c.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if isinstance(c.lr, bool) or not isinstance(c.lr, (int, float)) or not (math.isfinite(c.lr) and c.lr > 0):
        raise ValueError(f"lr must be a finite number > 0 (e.g. 3e-3), got {c.lr!r}")
    c, where = check_engine(c, local_ranks if local_ranks is not None else mesh.world)
    task = task_of(c)
    layers = task.layers()
    c = c.replace(recompute=parse_recompute(c.recompute, len(layers)))
    if c.recompute.on and c.stage_step is not None:
        raise ValueError(f"recompute={c.recompute} needs minipipe's own F and B, which stage_step replaces; "
                         f"use one or the other")
    x, _ = task.batch(0)
    cut, through = cut_model(c, schedule, layers, x[: c.batch_size // (c.dp * c.m)], where)
    check_not_shared(layers, cut)
    shapes = {n: tuple(p.shape) for n, p in torch.nn.Sequential(*layers).named_parameters()}
    meta = {**describe_model(c.model, c.model_args), "seed": c.seed, "batch_size": c.batch_size,
            "schedule": schedule.kind, "p": c.p, "dp": c.dp, "tp": c.tp, "param_shapes": shapes,
            "writers": [r for r in mesh.ranks() if mesh.coords(r).dp == 0]}   # one writer per distinct shard
    resume_from, resume_note = _check_checkpoint(c, shapes)
    note = "\n".join(n for n in (where.note, resume_note) if n) or None
    return Plan(c, schedule, cut, stage_outputs(cut, through), where.device, where.backend,
                resume_from=resume_from, meta=meta, gpus=where.gpus, note=note, mesh=mesh,
                layer_shapes=through, where=where.label)


def profile_device(where: Placement) -> torch.device:
    """The device partition="time" times the layers on: the first rank's."""
    return torch.device("cuda", where.gpus[0]) if where.device == "cuda" else torch.device("cpu")


# -- the checks every run shares, training or serving --------------------------------------------
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
    if c.fault is not None and not isinstance(c.fault, dict):
        raise ValueError(f"fault is a test hook, a dict such as {{'rank': 1, 'action': '1F2', 'kind': 'raise'}}; "
                         f"got {type(c.fault).__name__}")
    where = place(local_ranks, visible_gpus(), c.device, c.backend)
    if where.device == "cpu":
        check_cores(local_ranks, c.oversubscribe)
    if where.backend == "nccl" and not torch.distributed.is_nccl_available():
        raise ValueError("this torch build has no NCCL; use backend='gloo'")
    if c.message_order not in ("auto", "issue", "tag"):
        raise ValueError(f"unknown message_order {c.message_order!r}; choose auto, issue or tag")
    if c.message_order == "tag" and where.backend != "gloo":
        raise ValueError(f"message_order='tag' needs gloo, which matches messages by tag; {where.backend} matches "
                         f"them in issue order: use message_order='auto'")
    return c, where


def cut_model(c: EngineConfig, schedule: Schedule, layers: list, sample: torch.Tensor,
              where: Placement | None = None) -> tuple[Partition, list]:
    """Where the model's `layers` are cut into the schedule's stages, and the (shape, dtype)
    through every layer for one micro-batch (`sample`, layer_shapes); checks that tensor
    parallelism fits the layers and that every stage gets one. partition="time" times the layers
    where the ranks will run (`where`): a GPU run balanced by CPU timings is not balanced."""
    check_tensor_parallel(layers, c.tp)
    if schedule.n_stages > len(layers):
        n = len(layers)
        raise ValueError(f"p*v = {schedule.p}*{schedule.v} = {schedule.n_stages} stages but the model has only {n} "
                         f"layers; every stage needs at least one, so use p*v <= {n} (fewer ranks or stages per "
                         f"rank) or a deeper model (model_args)")
    if c.partition == "time":
        on = profile_device(where) if where is not None else torch.device("cpu")
        timed = layers if on.type == "cpu" else [copy.deepcopy(layer).to(on) for layer in layers]
        cut = partition(timed, schedule.n_stages, "time", sample_input=sample.to(on), device=on)
    else:
        cut = partition(layers, schedule.n_stages, c.partition)
    return cut, layer_shapes(layers, sample)


def stage_outputs(cut: Partition, through: list) -> list:
    """Each stage's output (shape, dtype), from the shapes through every layer."""
    return [through[cut.bounds[s + 1]] for s in range(cut.n_stages)]


def _check_given(c: EngineConfig, schedule: Schedule) -> None:
    """A p or m given beside a hand-written schedule must be the schedule's own: the schedule wins
    otherwise, and the run would not be the one asked for."""
    wrong = [(k, getattr(schedule, k), getattr(c, k)) for k in ("p", "m")
             if hasattr(c, k) and not isinstance(getattr(c, k), Default) and getattr(c, k) != getattr(schedule, k)]
    if wrong:
        has = " and ".join(f"{k}={own}" for k, own, _ in wrong)
        given = " and ".join(f"{k}={value}" for k, _, value in wrong)
        raise ValueError(f"the schedule you wrote has {has} (it sets them), but {given} "
                         f"{'was' if len(wrong) == 1 else 'were'} given; leave {' and '.join(k for k, *_ in wrong)} "
                         f"out, or give the schedule's")


def _sendable_step(step, schedule: Schedule):
    """A stage_step hook travels to the workers by value, as your own model does."""
    if step is None or isinstance(step, Sendable):
        return step
    if not callable(step):
        raise ValueError(f"stage_step must be a function stage_step(stage, baton), got {type(step).__name__}")
    if schedule.splits_backward():
        raise ValueError(f"stage_step replaces F and B, but the {schedule.kind} schedule splits backward into I and W; "
                         f"use a schedule with whole backwards (gpipe, 1f1b, interleaved)")
    try:
        return Sendable(step)
    except ValueError as e:
        raise ValueError(f"stage_step: {e}") from None


def _check_batch(c: RunConfig) -> None:
    """Each of the dp replicas takes batch_size/dp rows, cut into m equal micro-batches."""
    n = c.dp * c.m
    if c.batch_size % n:
        lo, hi = c.batch_size // n * n, (c.batch_size // n + 1) * n
        who = f"m={c.m} equal micro-batches" if c.dp == 1 else f"dp={c.dp} replicas × m={c.m} equal micro-batches"
        raise ValueError(f"batch_size={c.batch_size} does not split into {who}; use batch_size={lo or hi}"
                         + (f" or {hi}" if lo else "") + f" (a multiple of {'m' if c.dp == 1 else 'dp·m'} = {n})")


RANKS_PER_CORE = 4   # beyond this the ranks mostly wait for a core, and timeouts fire for no reason


def check_cores(ranks: int, oversubscribe: bool) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if ranks > RANKS_PER_CORE * cores and not oversubscribe:
        raise ValueError(f"{ranks} processes (p·dp·tp) on a machine with {cores} CPU core{'s' if cores > 1 else ''}: "
                         f"more than {RANKS_PER_CORE} per core, so they would mostly wait for a turn on a core and "
                         f"every time measured would mean little. Use at most {RANKS_PER_CORE * cores} "
                         f"(smaller p, dp or tp), or pass oversubscribe=True (--oversubscribe) to run anyway")


def _check_checkpoint(c: RunConfig, param_shapes: dict) -> tuple[str | None, str | None]:
    """The checkpoint to resume from (None: start at step 0) and what to tell the user about it."""
    if not isinstance(c.checkpoint_every, int) or c.checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be a whole number >= 0 (0: only at the end), got {c.checkpoint_every!r}")
    if not isinstance(c.resume, bool):
        raise ValueError(f"resume must be True or False, got {c.resume!r}")
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
            raise ValueError(f"{root!r} already holds checkpoints ({names or 'its latest pointer'}); pass resume=True "
                             f"to continue from the newest, or choose an empty checkpoint_dir (nothing saved is "
                             f"overwritten)")
        return None, None
    if not found:
        return None, f"resume: {root!r} holds no checkpoint yet, so training starts at step 0"
    path, skipped = checkpoint.newest(root)
    if path is None:
        raise checkpoint.CheckpointError(
            f"no intact checkpoint in {root!r}: " + "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped)
            + ". Nothing was started; repair or remove the damaged folders, or choose another checkpoint_dir")
    meta = checkpoint.check_matches(path, param_shapes)
    for key in ("seed", "batch_size"):
        if meta[key] != getattr(c, key):
            raise ValueError(f"the checkpoint was saved with {key}={meta[key]}, this run has {key}={getattr(c, key)}; "
                             f"resume with the same {key} (the data of each step depends on it)")
    if meta["step"] >= c.steps:
        raise ValueError(f"the checkpoint is already at step {meta['step']} and steps={c.steps}: nothing to train; "
                         f"raise steps above {meta['step']}")
    note = None
    if skipped:
        note = (f"resuming from {os.path.basename(path)}, the newest intact checkpoint in {root!r}; skipped as damaged "
                f"(left as they are; a save over one sets it aside as .damaged): "
                + "; ".join(f"{os.path.basename(p)} ({why})" for p, why in skipped))
    return path, note


MIN_TIMEOUT = 0.01           # seconds: below this a wait measures the OS's scheduling, not a peer
MIN_STARTUP_TIMEOUT = 1.0    # seconds: starting workers (a fork, joining the group) never takes less


def check_timeouts(c: EngineConfig) -> None:
    if not (isinstance(c.timeout, (int, float)) and MIN_TIMEOUT <= c.timeout < math.inf):
        raise ValueError(f"timeout must be at least {MIN_TIMEOUT} s, got {c.timeout!r}: it bounds one wait for a "
                         f"peer's data, and a shorter one would fire whenever the OS pauses a process for a "
                         f"time slice. The default, 60 s, suits the course models; use a few seconds to catch "
                         f"hangs quickly")
    if not (isinstance(c.startup_timeout, (int, float)) and MIN_STARTUP_TIMEOUT <= c.startup_timeout < math.inf):
        raise ValueError(f"startup_timeout must be at least {MIN_STARTUP_TIMEOUT:g} s, got {c.startup_timeout!r}: "
                         f"starting the ranks (processes, joining the process group, building the model) takes "
                         f"seconds. The default is 300 s")


def layer_shapes(layers, sample: torch.Tensor) -> list:
    """Run one micro-batch through the whole model once (no grad) and note the (shape, dtype) of
    each layer's input, and last the model's output: a receiver allocates its buffer from them
    before the data arrives, and the traffic formulas (accounting.py) count bytes with them."""
    shapes = [(tuple(sample.shape), sample.dtype)]
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        x = sample
        for i, layer in enumerate(layers):
            try:
                x = layer(x)
            except Exception as e:    # a shape or dtype mismatch, mostly: say which layer, on what
                got = f"{tuple(x.shape)} {x.dtype}" if torch.is_tensor(x) else type(x).__name__
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(f"layer {i} ({type(layer).__name__}) failed on its input of shape {got}, one "
                                 f"micro-batch: {type(e).__name__}: {first}. Check that its input size matches "
                                 + (f"what layer {i - 1} gives" if i else "what batch() gives")) from None
            shapes.append((tuple(x.shape), x.dtype))
    return shapes
