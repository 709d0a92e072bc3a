"""DeepSpeed's pipeline engine beside minipipe: its schedules read into minipipe's IR, its knobs
mapped to RunConfig, and its PipelineModule trained on gloo.

    streams = instruction_streams(p=2, m=4)       # DeepSpeed's own TrainSchedule, per rank and step
    schedule = to_schedule(p=2, m=4)              # the same order as a minipipe Schedule
    config = run_config({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
                        num_stages=2, model="gpt")  # DeepSpeed's knobs in minipipe's words
    run = train(config)                           # DeepSpeed's PipelineEngine on gloo: losses, traces

DeepSpeed keeps a schedule apart from its executor, as minipipe does: `TrainSchedule` (and
`InferenceSchedule`) yields, for one stage, a list of instructions per step — LoadMicroBatch,
ForwardPass, SendActivation, RecvGrad, BackwardPass, ..., ReduceGrads, OptimizerStep — and the
PipelineEngine runs each instruction. The steps are lock-step: a barrier could sit between any two.
An instruction names a buffer, not a micro-batch: buffers are reused in turn
(`micro_batch % num_pipe_buffers()`). Micro-batches enter each stage in order, so the k-th
ForwardPass (and the k-th BackwardPass) of a stage is micro-batch k; `to_schedule` reads them so
and checks every buffer against DeepSpeed's own rule.

Running here: DeepSpeed picks its CPU accelerator and trains on gloo. Two things it would build
on first use are avoided: its fused Adam (a C++ extension; we pass torch's Adam, which minipipe
also uses) and its shared-memory all-reduce for CPUs (another C++ extension, ~3 minutes to compile
on two cores; a pipeline of one replica makes no all-reduce that needs it, so we tell DeepSpeed it
is unavailable and it uses torch.distributed).

Passing an optimizer to `deepspeed.initialize` (a "client optimizer") makes the JSON config's
`optimizer` block dead: `DeepSpeedEngine._configure_optimizer` (deepspeed/runtime/engine.py) builds
one from the block only when none is passed, and otherwise takes the client's as it is, its type
and learning rate included. `train` passes torch's optimizer of the RunConfig, so the block
`ds_config_of` writes describes the run and changes nothing (the tests give a contrary one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..schedule.ir import Schedule
from ..schedule.ops import Action

COMPUTE = {"ForwardPass": "F", "BackwardPass": "B"}
# What a blocking communication instruction waits for: the producer of the data it moves.
RECEIVES = {"RecvActivation": ("F", -1), "RecvGrad": ("B", +1)}
SENDS = ("SendActivation", "SendGrad")
PEER = {"RecvActivation": -1, "RecvGrad": +1, "SendActivation": +1, "SendGrad": -1}  # which stage, relative


def _cpu_accelerator() -> None:
    """DeepSpeed runs on the CPU here: naming its accelerator spares its warning that it found none
    (a choice already in the environment is kept)."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _schedule_class(kind: str):
    _cpu_accelerator()
    from deepspeed.runtime.pipe import schedule as ds_schedule

    classes = {"train": ds_schedule.TrainSchedule, "inference": ds_schedule.InferenceSchedule}
    if kind not in classes:
        raise ValueError(f"DeepSpeed's pipeline schedules here are {', '.join(classes)}; got {kind!r}")
    return classes[kind]


def _check(p: int, m: int) -> None:
    if not (isinstance(p, int) and isinstance(m, int) and p >= 1 and m >= 1):
        raise ValueError(f"stages and micro-batches must be whole numbers >= 1; got p={p!r}, m={m!r}")


def instruction_streams(p: int, m: int, kind: str = "train") -> list[list[list]]:
    """DeepSpeed's instructions for every stage: `streams[stage][step]` is the list of
    PipeInstruction objects that stage runs in that lock-step step, from DeepSpeed's own code."""
    _check(p, m)
    cls = _schedule_class(kind)
    return [[list(cmds) for cmds in cls(micro_batches=m, stages=p, stage_id=s)] for s in range(p)]


def to_schedule(p: int, m: int, kind: str = "train") -> Schedule:
    """DeepSpeed's schedule for (p stages, m micro-batches) as a minipipe Schedule: each stage's
    forwards and backwards in the order DeepSpeed runs them (stage s on rank s)."""
    cls = _schedule_class(kind)
    actions = []
    for s, steps in enumerate(instruction_streams(p, m, kind)):
        buffers = cls(micro_batches=m, stages=p, stage_id=s).num_pipe_buffers()
        counts = {"F": 0, "B": 0}
        row = []
        for cmds in steps:
            for cmd in cmds:
                op = COMPUTE.get(type(cmd).__name__)
                if op is None:
                    continue
                mb = counts[op]
                counts[op] += 1
                if kind == "train" and cmd.buffer_id != mb % buffers:
                    raise RuntimeError(
                        f"DeepSpeed's stage {s} runs {cmd!r} as its micro-batch {mb}, but that "
                        f"micro-batch's buffer is {mb % buffers}: this DeepSpeed no longer takes "
                        f"micro-batches in order, and to_schedule needs updating"
                    )
                row.append(Action(op, s, mb))
        actions.append(row)
    return Schedule.build(f"deepspeed-{kind}", p, m, 1, actions)


def step_table(p: int, m: int, kind: str = "train") -> list[list[str]]:
    """DeepSpeed's lock-step steps as rows of short cells, one column per stage: `F2` a forward of
    micro-batch 2, `B0` a backward, `>a`/`<a` send/receive an activation, `>g`/`<g` a gradient,
    `step` the reduce and optimizer step. Steps a stage spends on nothing are empty."""
    short = {
        "SendActivation": ">a",
        "RecvActivation": "<a",
        "SendGrad": ">g",
        "RecvGrad": "<g",
        "OptimizerStep": "step",
    }
    grid = []
    for s, steps in enumerate(instruction_streams(p, m, kind)):
        mine = iter(a for a in to_schedule(p, m, kind).actions[s])
        col = []
        for cmds in steps:
            words = []
            for cmd in cmds:
                name = type(cmd).__name__
                if name in COMPUTE:
                    a = next(mine)
                    words.append(f"{a.op}{a.mb}")
                elif name in short:
                    words.append(short[name])
            col.append(" ".join(words))
        grid.append(col)
    return [list(row) for row in zip(*grid)]


def run_config(
    ds_config: dict,
    num_stages: int,
    world_size: int | None = None,
    partition_method: str = "parameters",
    activation_checkpoint_interval: int = 0,
    **run_args,
):
    """A DeepSpeed pipeline job (its JSON config and PipelineModule's arguments) as the minipipe
    RunConfig that trains the same thing; `run_args` are RunConfig's own (model, steps, ...).
    The optimizer is read from the JSON's block: what DeepSpeed builds when the job passes none of
    its own to deepspeed.initialize (with one, the block is ignored). Raises ValueError, naming the
    knob, for what minipipe does not do."""
    from ..engine.config import RunConfig

    world = world_size or num_stages
    if world % num_stages:
        raise ValueError(
            f"world_size={world} is not a multiple of num_stages={num_stages}: DeepSpeed makes "
            f"world ÷ num_stages data-parallel replicas; use a multiple"
        )
    dp = world // num_stages
    micro = ds_config.get("train_micro_batch_size_per_gpu")
    gas = ds_config.get("gradient_accumulation_steps")
    total = ds_config.get("train_batch_size")
    if total is not None and micro is not None and gas is None:
        gas = total // (micro * dp)
    if micro is None and total is not None and gas is not None:
        micro = total // (gas * dp)
    if micro is None or gas is None:
        raise ValueError(
            "give two of train_batch_size, train_micro_batch_size_per_gpu and "
            "gradient_accumulation_steps, as DeepSpeed needs"
        )
    if total is not None and total != micro * gas * dp:
        raise ValueError(
            f"train_batch_size={total} must equal micro-batch × accumulation × replicas = "
            f"{micro} × {gas} × {dp}; DeepSpeed refuses the mismatch too"
        )
    partitions = {"uniform": "uniform", "parameters": "params"}
    if partition_method.lower() not in partitions:
        raise ValueError(
            f"partition_method={partition_method!r} has no minipipe twin: 'uniform' balances layer "
            f"counts and 'parameters' parameter counts ('uniform' and 'params' here); "
            f"'type:regex' balances the layers whose class matches, which minipipe does not do"
        )
    if activation_checkpoint_interval:
        raise ValueError(
            "activation_checkpoint_interval > 0 recomputes activations in backward; minipipe keeps "
            "them (lesson 06 counts what that costs). Set it to 0 to compare: losses do not change"
        )
    zero = ds_config.get("zero_optimization", {}).get("stage", 0)
    if zero > 1:
        raise ValueError(f"zero_optimization stage {zero}: DeepSpeed's pipeline allows ZeRO stage 0 or 1 only")
    optimizer = ds_config.get("optimizer", {"type": "Adam", "params": {}})
    params = dict(optimizer.get("params", {}))
    if params.pop("weight_decay", 0):
        raise ValueError("weight_decay: minipipe's optimizers have none; set it to 0 to compare")
    kind = optimizer.get("type", "Adam").lower()
    if kind not in ("adam", "sgd"):
        raise ValueError(f"optimizer {optimizer.get('type')!r}: minipipe has Adam and SGD")
    lr = params.get("lr", RunConfig.lr)
    return RunConfig(
        schedule="1f1b",
        p=num_stages,
        m=gas,
        dp=dp,
        batch_size=micro * gas * dp,
        partition=partitions[partition_method.lower()],
        optimizer=kind,
        lr=lr,
        **run_args,
    )


def ds_config_of(config) -> dict:
    """The DeepSpeed JSON config that trains a minipipe RunConfig (the inverse of run_config)."""
    dp = config.dp
    return {
        "train_batch_size": config.batch_size,
        "train_micro_batch_size_per_gpu": config.batch_size // (dp * config.m),
        "gradient_accumulation_steps": config.m,
        "steps_per_print": 10**9,
        "optimizer": {
            "type": config.optimizer.capitalize() if config.optimizer == "adam" else "SGD",
            "params": {"lr": config.lr},
        },
    }


# -- DeepSpeed's PipelineEngine, on gloo -------------------------------------------------------
@dataclass
class DeepSpeedRankResult:
    rank: int
    losses: list[float]  # per step (DeepSpeed gives every stage the loss)
    events: list[list[tuple[str, float, float]]]  # per step: (action, start, end) of F and B
    waits: list[list[tuple[str, str, float, float]]]  # per step: (instruction, action it waits on, start, end)
    parts: list[int]  # DeepSpeed's cut: stage s holds layers parts[s]..parts[s+1]-1


def train_deepspeed_rank(work, rank: int, report, status=None) -> DeepSpeedRankResult:
    """A worker body (minipipe.engine.workers.launch): DeepSpeed's PipelineModule over the course
    model's layers on this rank, trained by its PipelineEngine with its TrainSchedule."""
    import contextlib
    import io
    import logging
    import os

    _cpu_accelerator()
    # DeepSpeed reads these as a launcher (torchrun, its own) would set them; the group is already up
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(plan_world(work)))
    import deepspeed
    import deepspeed.ops
    import torch
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
    from deepspeed.pipe import PipelineModule

    from ..models.catalog import task_of

    plan, partition_method, ds_config = work
    c = plan.config
    deepspeed.utils.logger.setLevel(logging.WARNING)
    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False  # see the module docstring
    torch.set_num_threads(c.threads)
    deepspeed.init_distributed(dist_backend="gloo")  # joins the group the worker is already in
    task = task_of(c)
    with contextlib.redirect_stdout(io.StringIO()):  # its print of the cut (run.parts has it)
        module = PipelineModule(
            layers=task.layers(),
            num_stages=c.p,
            loss_fn=task.loss,
            partition_method=partition_method,
            activation_checkpoint_interval=0,
        )
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(module.parameters(), lr=c.lr)
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=ds_config)  # a client optimizer
    stage, record, waiting = engine.stage_id, [], []
    engine._INSTRUCTION_MAP = _timed(engine._INSTRUCTION_MAP, stage, record, waiting)  # this engine's copy
    micro = c.batch_size // (c.dp * c.m)
    replica = engine.grid.data_parallel_id
    losses, events, waits = [], [], []
    for step in range(c.steps):
        if status is not None:
            status(step, -1, "compute")
        record.clear()
        waiting.clear()
        x, y = (t.chunk(c.dp)[replica] for t in task.batch(step))  # this replica's share, as minipipe's
        batches = iter([(x[i * micro : (i + 1) * micro], y[i * micro : (i + 1) * micro]) for i in range(c.m)])
        torch.distributed.barrier()
        loss = float(engine.train_batch(batches))
        losses.append(loss)
        if engine.is_last_stage():
            report("step", {"step": step, "loss": loss})
        events.append(list(record))
        waits.append(list(waiting))
    return DeepSpeedRankResult(rank, losses, events, waits, list(module.parts))


def plan_world(work) -> int:
    return work[0].world


def _timed(instruction_map: dict, stage: int, record: list, waiting: list) -> dict:
    """DeepSpeed's instruction table with each entry timed: forwards and backwards become minipipe
    actions (the k-th of a kind is micro-batch k), blocking sends and receives become waits."""
    counts = {"F": 0, "B": 0, **{name: 0 for name in (*RECEIVES, *SENDS)}}

    def wrap(name, fn):
        def run(self, *args, **kwargs):
            start = time.perf_counter()
            out = fn(self, *args, **kwargs)
            end = time.perf_counter()
            if name in COMPUTE:
                op = COMPUTE[name]
                record.append((f"{stage}{op}{counts[op]}", start, end))
                counts[op] += 1
            elif name in RECEIVES or name in SENDS:
                mb = counts[name]
                counts[name] += 1
                if name in RECEIVES:
                    op, step = RECEIVES[name]
                    waiting.append((name, f"{stage + step}{op}{mb}", start, end))
                else:
                    waiting.append((name, "", start, end))
            if name == "OptimizerStep":  # the batch is done: the next one counts from 0
                for key in counts:
                    counts[key] = 0
            return out

        return run

    return {cls: wrap(cls.__name__, fn) for cls, fn in instruction_map.items()}


@dataclass
class DeepSpeedRun:
    plan: object  # minipipe's Plan of the same run (its RunConfig, its cut)
    losses: list[float]  # one per step: DeepSpeed's mean loss over the batch
    traces: list  # a measured Trace per step: DeepSpeed's F and B, its blocking waits
    parts: list[int]  # DeepSpeed's layer bounds per stage


def train(config, partition_method: str = "uniform", ds_config: dict | None = None, progress=None) -> DeepSpeedRun:
    """Train a minipipe RunConfig (schedule 1f1b: DeepSpeed has one training schedule) with
    DeepSpeed's PipelineModule and PipelineEngine, one process per stage and replica, on gloo.
    `ds_config` is the JSON config DeepSpeed gets (default ds_config_of(config)); its optimizer
    block is ignored, as DeepSpeed ignores it beside a client optimizer (see the module docstring)."""
    from ..engine import workers
    from ..engine.config import prepare
    from ..engine.workers import Job
    from ..trace import Wait
    from .timeline import traces_from_events

    if config.tp != 1:
        raise ValueError("DeepSpeed's tensor parallelism comes from Megatron (its mpu=); train runs tp=1")
    if config.cp != 1:
        raise ValueError(
            f"train runs DeepSpeed's pipeline on whole sequences (cp=1); got cp={config.cp}: its sequence "
            f"parallelism (Ulysses) is another design, all-to-all rather than a ring"
        )
    if not (config.schedule == "1f1b" and (config.v or 1) == 1):
        raise ValueError(
            f"DeepSpeed trains with one schedule, TrainSchedule (1F1B, one stage per rank); "
            f"got schedule={config.schedule!r}, v={config.v}: use schedule='1f1b'"
        )
    plan = prepare(config.replace(device="cpu", backend="gloo"))
    ours = ds_config_of(config)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if ds_config is not None and key in ds_config and ds_config[key] != ours[key]:
            raise ValueError(
                f"ds_config says {key}={ds_config[key]}, the RunConfig {ours[key]}: make them agree "
                f"(run_config(ds_config, ...) gives the RunConfig of a DeepSpeed job)"
            )
    work = (plan, partition_method, ours if ds_config is None else ds_config)
    job = Job(work, "gloo", (), plan.pin_cores, config.timeout, config.startup_timeout)
    results = workers.launch([job], plan.world, train_deepspeed_rank, progress)
    # the first replica's pipeline: global ranks 0..p-1 under DeepSpeed's topology (pipe, data)
    ranks = [results[(0, r)] for r in range(plan.world)]
    pipeline = sorted(ranks, key=lambda res: res.rank)[:: plan.mesh.dp][: config.p]
    schedule = to_schedule(config.p, config.m)
    traces = traces_from_events(schedule, [res.events for res in pipeline], f"DeepSpeed {_version()}")
    for step, trace in enumerate(traces):
        zero = min(t0 for res in pipeline for _, t0, _ in res.events[step])
        for r, res in enumerate(pipeline):
            for name, producer, t0, t1 in res.waits[step]:
                kind = "recv" if name in RECEIVES else "send"
                trace.waits.append(
                    Wait(
                        r,
                        kind,
                        Action.parse(producer) if producer else None,
                        1000 * (t0 - zero),
                        1000 * (t1 - zero),
                        r + PEER[name],
                    )
                )
    return DeepSpeedRun(plan, pipeline[-1].losses, traces, pipeline[0].parts)


def _version() -> str:
    from . import version

    return version("deepspeed") or "?"
