"""What a run is: the config a user writes, and the Plan the workers see.

`RunConfig` is what a user writes to train; `prepare(config)` turns it into a `Plan` — the
validated schedule, where the model is cut, the activation shapes at each cut, the device and
backend — or raises a ValueError that says what to change. Workers only ever see a Plan.
Serving (serve/api.py) writes a ServeConfig or a GenerateConfig: the fields every run shares
are `EngineConfig`'s, declared here once, and a serving plan is a Plan too, with its stream or
generation in `Plan.work`. The checks live in run_checks.py, the cut and the shapes through it
in model_cut.py; prepare calls both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..fields import named_fields
from ..models.catalog import task_of
from ..models.custom import describe_model
from ..parallel.context import check_context_parallel, shard_sequence
from ..parallel.expert import check_expert_parallel
from ..parallel.mesh import Mesh
from ..schedule.ir import Schedule
from ..schedule.kinds import get as kind_named
from ..schedule.kinds import make_schedule
from ..schedule.validate import validate
from ..sim.recompute_costs import parse as parse_recompute
from ..traffic import DEFAULT_BUCKET_BYTES
from . import checkpoint
from .manifest import RUN, new_run_id
from .model_cut import cut_model, stage_outputs
from .partition import Partition, check_not_shared
from .run_checks import check_checkpoint, check_engine, check_no_flush, check_sizes, check_training, sendable_step


class Default(int):
    """A default that knows it was not given: a hand-written schedule's own p and m replace it,
    while a p or m the user gave and the schedule contradicts is refused (_check_given)."""


@named_fields
@dataclass(kw_only=True)
class EngineConfig:
    """What every run on the engine shares, training or serving: the model, how it is cut and
    scheduled, where its processes run, how long a wait may take. RunConfig adds training's own
    fields, serve.api's ServeConfig and GenerateConfig serving's; `check_engine` and `cut_model`
    check these once for all of them."""

    schedule: str | Schedule = "1f1b"  # naive | gpipe | 1f1b | interleaved | ... | inference, or your own Schedule
    p: int = Default(2)  # pipeline ranks (processes of one model copy)
    v: int | None = None  # stages per rank; default: the kind's own (2 for interleaved, else 1)
    tp: int = 1  # tensor-parallel shards of every layer (parallel/tensor.py)
    model: str | Callable = "mlp"  # mlp | gpt | "package.module:function" | your own function or class (custom.py)
    model_args: dict = field(default_factory=dict)  # e.g. {"width": 64, "depth": 8}
    seed: int = 0
    partition: str = "uniform"  # uniform | params | time
    recompute: object = "none"  # none | stage (each stage's forward again in its backward) | [layer indices]
    # (sim/recompute_costs.py: what each keeps and costs; engine/recomputing_stage.py)
    device: str = "auto"  # auto (the GPUs when any are visible, shared when fewer than ranks) | cpu | cuda
    backend: str = "auto"  # auto | gloo | nccl
    timeout: float = 60.0  # seconds any one wait for a peer may take, inside a step
    startup_timeout: float = 300.0  # seconds the ranks may take to start: find each other, build, load
    threads: int = 1  # torch threads per rank
    pin_cores: bool = True  # each rank on a free core of its own (engine/cores.py), when there are enough
    oversubscribe: bool = False  # allow more processes than this machine's cores can sensibly host
    message_order: str = "auto"  # auto | issue | tag: how the ranks match messages (see comm.py);
    # "issue" runs NCCL's in-order matching on gloo, to check it on CPU
    fault: dict | None = None  # test hook: {"rank": 1, "step": 0, "action": "1F2", "kind": "raise"}

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@named_fields
@dataclass(kw_only=True)
class RunConfig(EngineConfig):
    """A training run. world = p · dp · cp · tp processes, placed on a mesh (parallel/mesh.py); ep
    borrows its ranks from dp × cp."""

    m: int = Default(4)  # micro-batches per step
    dp: int = 1  # data-parallel replicas, each its own share of the batch (parallel/data.py)
    cp: int = 1  # context-parallel ranks, each its own share of every sequence
    ep: int = 1  # expert-parallel ranks, each a share of the experts; borrowed from dp × cp
    dp_overlap: bool = True  # start the gradient all-reduces during the backward (as DDP); False: after it
    dp_bucket_bytes: int = DEFAULT_BUCKET_BYTES  # gradient bytes per all-reduce
    batch_size: int = 32
    steps: int = 10
    optimizer: str = "adam"
    lr: float = 3e-3
    trace_steps: int | None = None  # keep the traces of the last N steps (None: all)
    return_grads: bool = False  # also return the gradients of the first step (for tests)
    checkpoint_dir: str | None = None  # save here (see checkpoint.py)
    checkpoint_every: int = 0  # steps between checkpoints; 0: only after the last step
    resume: bool = False  # continue from the newest checkpoint in checkpoint_dir, if any
    stage_step: Callable | None = None  # your own F and B: stage_step(stage, baton) (stage_step.py; exercise 06)


@dataclass
class Plan:
    """A run worked out and checked, training or serving: all the workers ever see."""

    config: EngineConfig
    schedule: Schedule
    partition: Partition
    shapes: list  # shapes[k] = (shape, dtype) of stage k's output for one micro-batch; where
    # they change with the micro-batch (generation), a function of the producer
    device: str  # "cpu" or "cuda"
    backend: str  # "gloo" or "nccl"
    resume_from: str | None = None  # checkpoint folder to load before the first step
    meta: dict = field(default_factory=dict)  # what a checkpoint records about the run
    gpus: tuple[int, ...] = ()  # local rank r on CUDA device gpus[r]; () on the CPU (placement.place)
    note: str | None = None  # what the run tells the user once: where it runs, what it resumes
    where: str = "on the CPU (gloo)"  # where the ranks run, in a few words (placement.Placement.label)
    mesh: Mesh = Mesh()  # pp = p, dp, cp, ep, tp: where each process sits
    layer_shapes: list = field(default_factory=list)  # (shape, dtype) of each layer's input, one micro-batch
    state: dict | None = None  # weights to load into the stages (serving); None: the seed's
    work: Any = None  # what a serving run adds (serve/work.py): its stream, or its generation

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
    `local_ranks` is how many ranks share this machine (default: all p·dp·cp·tp)."""
    if not isinstance(config, RunConfig):
        raise ValueError(f"expected a RunConfig, got {type(config).__name__}")
    c = config
    if isinstance(c.schedule, Schedule):  # a hand-written schedule brings its own p, m and v
        schedule = validate(c.schedule)
        _check_given(c, schedule)
        c = c.replace(p=schedule.p, m=_per_step(schedule), v=schedule.v)
    else:  # a kind without a flush is one schedule for all the steps
        check_sizes(c)  # before the schedule is built: m above the batch never builds one
        steps = c.steps if kind_named(c.schedule).asynchronous is not None else None
        schedule = make_schedule(c.schedule, c.p, c.m, resolve_v(c), steps=steps)
    if schedule.forward_only:
        raise ValueError(
            f"the {schedule.kind} schedule is forward only: it serves (minipipe.serve.api), it does not "
            f"train; choose one with a backward, e.g. 1f1b"
        )
    if schedule.updates is not None:
        check_no_flush(c, schedule)
    c = c.replace(stage_step=sendable_step(c.stage_step, schedule))
    mesh = Mesh(c.p, dp=c.dp, cp=c.cp, ep=c.ep, tp=c.tp)
    check_training(c)
    c, where = check_engine(c, local_ranks if local_ranks is not None else mesh.world)
    task = task_of(c)
    layers = built(task.layers, "the model's layers", "smaller model_args")
    c = c.replace(recompute=parse_recompute(c.recompute, len(layers)))
    if c.recompute.on and c.stage_step is not None:
        raise ValueError(
            f"recompute={c.recompute} needs minipipe's own F and B, which stage_step replaces; use one or the other"
        )
    x, _ = built(lambda: task.batch(0), f"a batch of {c.batch_size} rows", "a smaller batch_size")
    check_context(c, layers, x)
    sample = shard_sequence(x[: c.batch_size // (c.dp * c.m)], c.cp, 0)  # one rank's micro-batch
    cut, through = cut_model(c, schedule, layers, sample, where)
    check_not_shared(layers, cut)
    check_experts(c, layers)
    shapes = {n: tuple(p.shape) for n, p in torch.nn.Sequential(*layers).named_parameters()}
    meta = {
        **describe_model(c.model, c.model_args),
        "seed": c.seed,
        "batch_size": c.batch_size,
        "schedule": schedule.kind,
        "p": c.p,
        "dp": c.dp,
        "cp": c.cp,
        "ep": c.ep,
        "tp": c.tp,
        "param_shapes": shapes,
        "writers": [r for r in mesh.ranks() if is_writer(mesh.coords(r), mesh)],
    }
    resume_from, resume_note = check_checkpoint(c, shapes)
    # a resume continues its run: its steps keep the run id the checkpoint's manifest names
    meta[RUN] = (resume_from and checkpoint.read_meta(resume_from).get(RUN)) or new_run_id()
    note = "\n".join(n for n in (where.note, resume_note) if n) or None
    return Plan(
        c,
        schedule,
        cut,
        stage_outputs(cut, through),
        where.device,
        where.backend,
        resume_from=resume_from,
        meta=meta,
        gpus=where.gpus,
        note=note,
        mesh=mesh,
        layer_shapes=through,
        where=where.label,
    )


def _per_step(schedule: Schedule) -> int:
    """Micro-batches per training step: a schedule of several steps (updates) holds m of each."""
    return schedule.m if schedule.updates is None else schedule.updates.per_step


def is_writer(at, mesh: Mesh | None = None) -> bool:
    """Whether the rank at these coordinates saves its parameters: one per distinct tp shard of a
    stage (dp and cp replicas hold the same ones); with ep > 1 on `mesh`, the ranks of the first ep
    group, which hold every expert between them (their other parameters are the same)."""
    if mesh is not None and mesh.ep > 1:
        return at.dp * mesh.cp + at.cp < mesh.ep
    return at.dp == 0 and at.cp == 0


def check_experts(c: RunConfig, layers) -> None:
    """Expert parallelism's own conditions: a model with experts that ep divides
    (parallel/expert.py), and no recomputation, which would run every all-to-all of the forward
    again inside the backward, two more per MoE layer that the byte formula leaves out."""
    check_expert_parallel(layers, c.ep)
    if c.ep > 1 and c.recompute.on:
        raise ValueError(
            f"recompute={c.recompute} with ep={c.ep} would run each MoE layer's dispatch and combine "
            f"all-to-alls again inside every backward; use recompute='none' with ep > 1"
        )


def check_context(c: RunConfig, layers, x) -> None:
    """Context parallelism's own conditions: a model with a sequence to split (parallel/context.py)
    and no recomputation, which would run the ring again inside the backward."""
    check_context_parallel(layers, c.cp, x)
    if c.cp > 1 and c.recompute.on:
        raise ValueError(
            f"recompute={c.recompute} with cp={c.cp} would run ring attention's forward again inside "
            f"every backward, cp − 1 more K, V steps per block that the byte formulas leave out; "
            f"use recompute='none' with cp > 1"
        )


def _check_given(c: EngineConfig, schedule: Schedule) -> None:
    """A p or m given beside a hand-written schedule must be the schedule's own: the schedule wins
    otherwise, and the run would not be the one asked for."""
    own = {"p": schedule.p, "m": _per_step(schedule)}
    wrong = [
        (k, own[k], getattr(c, k))
        for k in ("p", "m")
        if hasattr(c, k) and not isinstance(getattr(c, k), Default) and getattr(c, k) != own[k]
    ]
    if wrong:
        has = " and ".join(f"{k}={own}" for k, own, _ in wrong)
        given = " and ".join(f"{k}={value}" for k, _, value in wrong)
        raise ValueError(
            f"the schedule you wrote has {has} (it sets them), but {given} "
            f"{'was' if len(wrong) == 1 else 'were'} given; leave {' and '.join(k for k, *_ in wrong)} "
            f"out, or give the schedule's"
        )


def built(make, what: str, instead: str):
    """`make()`, or a ValueError naming what could not be built: on the CPU a tensor larger than
    the memory is a plain RuntimeError from torch's allocator, which names bytes, not the setting
    behind them."""
    try:
        return make()
    except MemoryError:
        raise ValueError(f"{what} cannot be built in this machine's memory; use {instead}") from None
    except RuntimeError as e:
        said = " ".join(str(e).split())[:240]
        raise ValueError(f"building {what} failed ({said}); where it ran out of memory, use {instead}") from None
