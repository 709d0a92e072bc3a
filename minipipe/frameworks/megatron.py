"""Megatron-Core's pipeline schedules beside minipipe: the order its loops run, recorded, and the
course model trained through them on gloo.

    rec = record(p=4, m=8, v=2)                  # Megatron's own loops, every rank, no processes
    rec.schedule                                 # the order as a minipipe Schedule: validate, simulate
    rec.streams[0][:6]                           # ['0F0', 'send_next+recv_prev', ...]: compute and communication
    run = train(RunConfig(schedule="interleaved", p=2, m=4, model="gpt"))          # on gloo, real exchange
    run = train(RunConfig(schedule="1f1b", p=2, dp=2, m=4, batch_size=32, model="gpt"))   # two pipelines

`forward_backward_pipelining_without_interleaving` (1F1B) and `..._with_interleaving` are Python
loops: warm-up forwards, a steady 1F1B, a cool-down. They call the user's `forward_step_func`, their
own `backward_step` (autograd from the chunk's output), and a `P2PCommunicator` whose public
methods (`recv_forward`, `send_forward_recv_backward`, ...) all end in one `_communicate(...)`.
`megatron_loop.py` runs those loops unchanged, for one rank, with a few things of ours (model
chunks by Megatron's conventions, its communicator recorded, CUDA answered by the CPU, and with
dp > 1 the gradients averaged where Megatron-LM's DDP would).

How the ranks exchange follows Megatron-LM (megatron/training/arguments.py, core_v0.16.1):
`validate_args` sets overlap_p2p_comm False for 1F1B and keeps it (its default;
`--no-overlap-p2p-communication` clears it) for the interleaved loop, and
`core_transformer_config_from_args` sets batch_p2p_comm = not overlap_p2p_comm. So 1F1B exchanges
batched (`batch_isend_irecv`), the interleaved loop overlapped (`_p2p_ops`: separate isend and irecv,
each waited for where the loop needs it). Interleaving without overlap is refused on two ranks:

    if args.virtual_pipeline_model_parallel_size is not None:
        if args.overlap_p2p_comm: ...
        else:
            assert args.pipeline_model_parallel_size > 2, <REFUSED below>

With two ranks a rank's previous and next rank are one peer, and the loop's combined exchange
sends it a gradient and an activation in one batch, posted on both ranks as (send to prev, receive
from prev, send to next, receive from next): the peer's first receive (an activation) meets the
first send (a gradient). Matched in order (gloo by tag, all 0 here) they cross and the losses go
wrong; `train(..., overlap_p2p_comm=False, megatron_lm_checks=False)` shows it (the tests do).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule.ir import Schedule
from ..schedule.ops import Action
from .megatron_loop import Group, Loop, gradients_averaged_over, quiet, rank_loop

# Megatron-LM's own words for the one exchange it refuses (see the module docstring)
REFUSED = (
    "When interleaved schedule is used and p2p communication overlap is disabled, pipeline-model-parallel "
    "size should be greater than 2 to avoid having multiple p2p sends and recvs between same 2 ranks per "
    "communication batch"
)


@dataclass
class Recording:
    schedule: Schedule  # every rank's forwards and backwards, in Megatron's order
    streams: list[list[str]]  # per rank, every call in order: "1F0", "send_next+recv_next", ...
    group_size: int  # --microbatch-group-size-per-virtual-pipeline-stage used
    overlap_p2p_comm: bool  # how the loops exchanged (batch_p2p_comm is its opposite)


def exchange(
    p: int, interleaved: bool, overlap_p2p_comm: bool | None = None, megatron_lm_checks: bool = True
) -> tuple[bool, bool]:
    """(overlap_p2p_comm, batch_p2p_comm) for a pipeline of p ranks, as Megatron-LM sets them
    (None: its default, overlap for the interleaved loop only). With megatron_lm_checks, what
    Megatron-LM's validate_args refuses is refused here; without, whatever Megatron-Core accepts."""
    overlap = interleaved if overlap_p2p_comm is None else bool(overlap_p2p_comm)
    if megatron_lm_checks and overlap and not interleaved:
        raise ValueError(
            "Megatron-LM overlaps p2p communication in the interleaved loop only: for 1F1B its "
            "validate_args sets overlap_p2p_comm False ('non-interleaved schedule does not support "
            "overlapping p2p communication'); leave overlap_p2p_comm=None"
        )
    if megatron_lm_checks and interleaved and not overlap and p <= 2:
        raise ValueError(
            f"interleaving on p={p} ranks without p2p overlap is refused by Megatron-LM "
            f"(megatron/training/arguments.py, validate_args: assert "
            f"args.pipeline_model_parallel_size > 2, '{REFUSED}'). Keep overlap_p2p_comm (its "
            f"default), use p > 2, or pass megatron_lm_checks=False to see the exchange cross"
        )
    return overlap, not overlap


def _check(p: int, m: int, v: int | None, group_size: int | None) -> None:
    if not all(isinstance(x, int) and x >= 1 for x in (p, m)) or p < 2:
        raise ValueError(
            f"Megatron's pipeline schedules need p >= 2 ranks and m >= 1 micro-batches; got p={p!r}, m={m!r}"
        )
    if v is not None and (not isinstance(v, int) or v < 2):
        raise ValueError(
            f"v is the number of model chunks per rank for the interleaved loop: >= 2, or None for 1F1B; got {v!r}"
        )
    if group_size is not None and v is None:
        raise ValueError(
            "group_size (--microbatch-group-size-per-virtual-pipeline-stage) applies to the "
            "interleaved loop only: give v >= 2"
        )
    if v is not None:
        g = p if group_size is None else group_size
        if not p <= g <= m:
            raise ValueError(
                f"Megatron needs p <= group_size <= m for its interleaved loop; got p={p}, group_size={g}, m={m}"
            )
        if 0 < m % g < p:
            raise ValueError(
                f"m % group_size = {m % g} is between 0 and p={p}: Megatron refuses that (the last group "
                f"would stall the pipeline); choose m a multiple of {g}, or a remainder >= {p}"
            )


def record(
    p: int, m: int, v: int | None = None, group_size: int | None = None, overlap_p2p_comm: bool | None = None
) -> Recording:
    """Run Megatron-Core's loop for every rank of a (p, m, v) pipeline, in this process, and record
    the order of its calls. v=None: `..._without_interleaving` (1F1B); v >= 2 chunks per rank:
    `..._with_interleaving`, with micro-batch groups of `group_size` (Megatron's default: p).
    The exchange is Megatron-LM's (see `exchange`); nothing is sent, so any Megatron-Core accepts
    can be recorded. Megatron asks a process group its rank and size, so this runs in a one-process
    gloo group of its own (unless one is up), with a stand-in group of p for each rank."""
    import torch
    import torch.distributed as dist

    _check(p, m, v, group_size)
    overlap, batched = exchange(p, v is not None, overlap_p2p_comm, megatron_lm_checks=False)
    loop = Loop(p, m, v, group_size, overlap, batched, dtype=torch.float32)
    with quiet():
        own_group = not dist.is_initialized()
        if own_group:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            streams, actions = [], []
            for rank in range(p):
                log: list[str] = []
                chunks = [_recording_chunk(c * p + rank) for c in range(v or 1)]
                data = [iter([(torch.zeros(1, 1, 1), None)] * m) for _ in chunks]
                events, _ = rank_loop(
                    loop, Group(p, rank), chunks, data, log, wire=False, loss=lambda out, y: out.sum()
                )
                streams.append(log)
                actions.append([Action.parse(a) for a, _, _ in events])
        finally:
            if own_group:
                dist.destroy_process_group()
    g = (group_size or p) if v else 0
    kind = f"megatron-{'interleaved' if v else '1f1b'}"
    return Recording(Schedule.build(kind, p, m, v or 1, actions), streams, g, overlap)


def _recording_chunk(stage: int):
    import torch

    return torch.nn.Linear(1, 1), stage, (lambda x: x), (lambda x: x)


# -- the course model through Megatron's loops, on gloo -----------------------------------------
@dataclass
class MegatronRankResult:
    rank: int
    losses: list[float]  # per step, on the last stage's rank; [] elsewhere
    events: list[list[tuple[str, float, float]]]  # per step: (action, start, end)
    streams: list[str]  # the last step's calls, compute and communication


def _wire(shape):
    """To and from Megatron's [sequence, micro-batch, hidden] for an activation of `shape`."""
    if len(shape) == 3:  # (b, t, c): the GPT's
        return (lambda x: x.transpose(0, 1).contiguous()), (lambda x: x.transpose(0, 1)), (shape[1], shape[0], shape[2])
    if len(shape) == 2:  # (b, c): the MLP's
        return (lambda x: x.unsqueeze(0)), (lambda x: x.squeeze(0)), (1, shape[0], shape[1])
    raise ValueError(
        f"Megatron's loops send [sequence, micro-batch, hidden] tensors; this model's activations are "
        f"{tuple(shape)}: use the course's gpt or mlp"
    )


def train_megatron_rank(work, rank: int, report, status=None) -> MegatronRankResult:
    """A worker body (minipipe.engine.workers.launch): the plan's stages on this rank as Megatron
    model chunks, stepped by Megatron-Core's loop over its pipeline's group on gloo."""
    import warnings

    import torch

    from ..engine.partition import stage_module
    from ..models.catalog import task_of
    from ..parallel.mesh import make_groups

    plan, group_size, overlap, batched = work
    c, s = plan.config, plan.schedule
    warnings.filterwarnings("ignore", category=UserWarning, module="megatron")  # as quiet(): a worker of its own
    torch.set_num_threads(c.threads)
    groups = make_groups(plan.mesh)
    task = task_of(c)
    layers = task.layers()
    to_wire, from_wire, wire_shape = _wire(plan.shapes[0][0])
    bodies = {k: stage_module(layers, plan.partition, k) for k in s.stages_of(groups.pp.index)}
    chunks = [(bodies[k], k, to_wire, from_wire) for k in sorted(bodies)]
    params = [q for body in bodies.values() for q in body.parameters()]
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(params, lr=c.lr)
    loop = Loop(s.p, s.m, s.v if s.v > 1 else None, group_size, overlap, batched, wire_shape, plan.shapes[0][1])
    finalize = gradients_averaged_over(groups.dp.group, groups.dp.size) if groups.dp.size > 1 else None
    losses, steps, log = [], [], []
    for step in range(c.steps):
        if status is not None:
            status(step, -1, "compute")
        log.clear()
        for body in bodies.values():
            body.zero_grad(set_to_none=True)
        x, y = (t.chunk(groups.dp.size)[groups.dp.index] for t in task.batch(step))  # this replica's share
        batches = list(zip(x.chunk(s.m), y.chunk(s.m)))
        data = [iter(batches) for _ in chunks]
        torch.distributed.barrier()
        events, found = rank_loop(
            loop, groups.pp.group, chunks, data, log, wire=True, loss=task.loss, finalize=finalize
        )
        optimizer.step()
        if found:
            losses.append(torch.stack(found).sum().item())  # as minipipe's Stage.step_loss sums them
            report("step", {"step": step, "loss": losses[-1]})
        steps.append(events)
    return MegatronRankResult(rank, losses, steps, list(log))


@dataclass
class MegatronRun:
    plan: object  # minipipe's Plan of the same run (its cut, its model)
    recording: Recording  # what Megatron's loops ran, as a minipipe Schedule, and their calls
    losses: list[float]  # one per step: the full-batch mean loss (the replicas' mean)
    traces: list  # a measured Trace per step: the first pipeline's forwards and backwards
    overlap_p2p_comm: bool  # how its ranks exchanged (batch_p2p_comm was the opposite)


def train(
    config,
    group_size: int | None = None,
    overlap_p2p_comm: bool | None = None,
    megatron_lm_checks: bool = True,
    progress=None,
) -> MegatronRun:
    """Train a minipipe RunConfig (schedule 1f1b, or interleaved with v >= 2; tp = 1, dp any)
    through Megatron-Core's own loops on gloo, one process per rank. The ranks exchange as
    Megatron-LM has them (`exchange`: batched for 1F1B, overlapped for the interleaved loop);
    `overlap_p2p_comm` overrides that, within what Megatron-LM allows unless megatron_lm_checks=False."""
    return train_many([config], group_size, overlap_p2p_comm, megatron_lm_checks, progress)[0]


def train_many(
    configs: list,
    group_size: int | None = None,
    overlap_p2p_comm: bool | None = None,
    megatron_lm_checks: bool = True,
    progress=None,
) -> list[MegatronRun]:
    """`train` for several RunConfigs of one world size, in one group of processes (starting one
    costs seconds); everything is checked before any process starts."""
    from ..engine import workers
    from ..engine.workers import Job

    if not configs:
        return []
    plans, jobs, recordings = [], [], []
    for config in configs:
        plan, (overlap, batched) = _plan(config, group_size, overlap_p2p_comm, megatron_lm_checks)
        s = plan.schedule
        recordings.append(record(s.p, s.m, s.v if s.v > 1 else None, group_size, overlap))
        plans.append(plan)
        jobs.append(
            Job(
                (plan, group_size, overlap, batched), "gloo", (), plan.pin_cores, config.timeout, config.startup_timeout
            )
        )
    if len({pl.world for pl in plans}) > 1:
        raise ValueError("train_many needs the same number of processes (p·dp) for every config; split them into calls")
    results = workers.launch(jobs, plans[0].world, train_megatron_rank, progress)
    return [
        _run(pl, rec, [results[(j, r)] for r in range(pl.world)]) for j, (pl, rec) in enumerate(zip(plans, recordings))
    ]


def _plan(config, group_size, overlap_p2p_comm, megatron_lm_checks):
    """minipipe's Plan of a run for Megatron's loops, and its (overlap, batched) exchange; or why not."""
    from ..engine.config import prepare

    if config.tp != 1 or config.cp != 1:
        raise ValueError(
            "train runs Megatron's pipeline loops (tp=1, cp=1); Megatron's tensor and context "
            "parallelism come from its own layers (ColumnParallelLinear, ..., Transformer Engine's "
            "attention), which minipipe's models do not use"
        )
    if config.schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"Megatron-Core's pipeline schedules are 1F1B and interleaved 1F1B; got {config.schedule!r}")
    plan = prepare(config.replace(device="cpu", backend="gloo"))
    s = plan.schedule
    v = s.v if config.schedule == "interleaved" else None
    _check(s.p, s.m, v, group_size)
    chosen = exchange(s.p, v is not None, overlap_p2p_comm, megatron_lm_checks)
    if len({shape for shape, _ in plan.shapes[:-1]}) > 1:
        raise ValueError("Megatron's loops send one tensor shape at every cut; this model's cuts differ")
    _wire(plan.shapes[0][0])
    return plan, chosen


def _run(plan, recording: Recording, ranks: list[MegatronRankResult]) -> MegatronRun:
    from .timeline import traces_from_events

    first = [ranks[r] for r in plan.mesh.pipeline(0)]  # the first replica's pipeline
    traces = traces_from_events(recording.schedule, [res.events for res in first], "Megatron-Core")
    replicas = [res.losses for res in ranks if res.losses]  # each replica's mean over its share
    losses = [sum(step) / len(step) for step in zip(*replicas)]
    return MegatronRun(plan, recording, losses, traces, recording.overlap_p2p_comm)
