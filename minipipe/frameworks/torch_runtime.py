"""minipipe's schedules in the CSV that PyTorch's pipelining runtime loads, run by that runtime.

    text = to_csv(make_schedule("zb-h1", p=2, m=4))   # one row per rank: 0F0,0F1,0I0,...
    schedule = from_csv(text)                         # back into minipipe: validate, simulate, draw
    runs = runtime_runs([RunConfig(schedule=..., p=2, m=4, model="gpt")])

The format is torch's own: `_PipelineScheduleRuntime._load_csv` reads one row per rank, each cell
an action in the text `_Action.from_str` parses (`{stage}{op}{microbatch}`, the text minipipe
prints). A schedule of computations alone is written "compute_only": loading validates the lists,
infers which rank owns which stage, and lowers them into a stream with the sends, receives,
unshards, reshards and gradient reductions added (torch derives them from the compute order, as
minipipe does). A schedule that writes any of those (schedule/ops.py) is written "compute_comms", every
action torch's runtime runs, in its order, sends and receives written out where the schedule
leaves them to be derived (schedule/lowering.py): in that format torch adds nothing. `csv_format`
says which. torchtitan reads the compute-only file (`--parallelism.pipeline_parallel_schedule_csv`),
so a schedule written or generated here runs on a real cluster through it, given the schedule name
that makes torchtitan build its stages where the file puts them (`torchtitan.command` writes the
whole command; its docstring says why).

`runtime_runs` trains minipipe's RunConfigs (any schedule with F, B, I and W, your own included;
tp = 1) with `_PipelineScheduleRuntime` on minipipe's stages: the same weights, batches and
optimizer as minipipe's executor, torch's runtime instead of it. With dp > 1 it composes as
torchtitan does: every stage's layers `fully_shard`-ed over the data-parallel ranks of a (pp, dp)
DeviceMesh, parameters kept gathered through the step (reshard_after_forward=False, torchtitan's
choice under a pipeline), and torch's runtime gathering each stage once before its first action
and reduce-scattering its gradients once after its last (the UNSHARD, RESHARD and REDUCE_GRAD
actions it adds when it lowers the CSV, or those the schedule writes). The leading underscore says
the runtime is not public API: this is tested with torch 2.13.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
import time
from dataclasses import dataclass

from ..schedule.ir import Schedule
from ..schedule.lowering import with_fsdp, with_sends_and_receives
from ..schedule.ops import COMPUTE


def csv_format(schedule: Schedule) -> str:
    """How torch's runtime must load `to_csv(schedule)`: "compute_only" (it adds the rest) or
    "compute_comms" (the schedule writes more than its computations: it runs them as written)."""
    return "compute_only" if schedule.op_types <= COMPUTE else "compute_comms"


def to_csv(schedule: Schedule) -> str:
    """The schedule as torch's CSV: one row per rank, one action per cell (`csv_format` says
    which of torch's two formats)."""
    if schedule.updates is not None:
        raise ValueError(
            f"the {schedule.kind} schedule updates its weights inside its lists ({schedule.steps} steps, "
            f"rule {schedule.updates.rule!r}); torch's runtime runs one flushed step and leaves the "
            f"optimizer to you, so it would run these steps as one with one update. Export a flushed "
            f"kind's single step (make_schedule without steps=)"
        )
    if csv_format(schedule) == "compute_comms":
        schedule = with_sends_and_receives(schedule)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in schedule.actions:
        writer.writerow([str(a) for a in row])
    return out.getvalue()


def from_csv(text: str, m: int | None = None) -> Schedule:
    """A schedule from torch's CSV (as `to_csv` writes it, a file made for torchtitan, or torch's
    own lowered stream, sends and FSDP's actions included). Each stage's rank is read off the rows,
    as torch infers it; m from the highest micro-batch unless given."""
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not rows:
        raise ValueError("the CSV has no rows: write one row per rank, e.g. '0F0,0F1,0B0,0B1'")
    lists = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    schedule = Schedule.custom(lists, m=m)
    owner: dict[int, int] = {}
    for r, row in enumerate(schedule.actions):
        for a in row:
            if owner.setdefault(a.stage, r) != r:
                raise ValueError(
                    f"stage {a.stage} has actions on ranks {owner[a.stage]} and {r}; "
                    f"a stage lives on one rank: move its actions to one row"
                )
    n_stages = len(owner)
    if sorted(owner) != list(range(n_stages)) or n_stages % schedule.p:
        raise ValueError(
            f"the CSV's stages are {sorted(owner)}; torch needs stages 0..n-1 with n a multiple "
            f"of the {schedule.p} ranks"
        )
    v = n_stages // schedule.p
    return Schedule.build(
        "custom", schedule.p, schedule.m, v, schedule.actions, [owner[s] for s in range(n_stages)], schedule.paired
    )


@dataclass
class RuntimeRankResult:
    rank: int
    losses: list[float]  # per step, on the last stage's rank; [] elsewhere
    events: list[list[tuple[str, float, float]]]  # per step: (action, start, end), perf_counter seconds
    lowered: dict[int, list[str]]  # torch's stream with communication, per rank (rank 0 only)
    collectives: list[dict]  # per step, with FSDP: fsdp.Counter.step


def train_runtime_rank(work, rank: int, report, status=None) -> RuntimeRankResult:
    """A worker body (minipipe.engine.workers.launch): the plan's stages on this rank, stepped by
    torch's `_PipelineScheduleRuntime` loaded from the schedule's CSV."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from ..engine.partition import stage_module
    from ..models.catalog import task_of
    from .timeline import time_calls

    plan, text = work
    c, s = plan.config, plan.schedule
    torch.set_num_threads(c.threads)
    task = task_of(c)
    layers = task.layers()
    where, dp = plan.mesh.coords(rank), plan.mesh.dp
    mine = {k: stage_module(layers, plan.partition, k) for k in s.stages_of(where.pp)}
    group, counter = None, None
    if dp > 1:  # FSDP inside each stage, over this stage's replicas
        from torch.distributed.device_mesh import init_device_mesh

        from .fsdp import Counter, shard

        mesh = init_device_mesh("cpu", (s.p, dp), mesh_dim_names=("pp", "dp"))
        group, counter = mesh["pp"].get_group(), Counter()
        for module in mine.values():
            shard(module, mesh["dp"], counter, reshard_after_forward=False)
    stages = [PipelineStage(mine[k], k, s.n_stages, torch.device("cpu"), group=group) for k in sorted(mine)]
    m = s.m

    def scaled_loss(output, target):  # minipipe's convention: loss / m per micro-batch
        return task.loss(output, target) / m

    runtime = _PipelineScheduleRuntime(stages, m, loss_fn=scaled_loss, scale_grads=False)
    with tempfile.TemporaryDirectory() as folder:  # torch loads a file: torchtitan's way in
        path = os.path.join(folder, "schedule.csv")
        with open(path, "w") as f:
            f.write(text)
        runtime._load_csv(path, format=csv_format(s))
    params = [q for module in mine.values() for q in module.parameters()]
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(params, lr=c.lr)
    record: list[tuple[str, float, float]] = []
    for stage in stages:
        time_calls(stage, record, time.perf_counter)
    has_first, has_last = 0 in mine, s.n_stages - 1 in mine
    losses, steps, per_step = [], [], []
    for step in range(c.steps):
        if status is not None:
            status(step, -1, "compute")
        record.clear()
        if counter is not None:
            counter.calls.clear()
        for module in mine.values():
            module.zero_grad(set_to_none=True)
        x, y = (t.chunk(dp)[where.dp] for t in task.batch(step))  # this replica's share, as minipipe's
        dist.barrier()  # every step starts together, as minipipe's do
        found: list | None = [] if has_last else None
        runtime.step(*((x,) if has_first else ()), target=y if has_last else None, losses=found, return_outputs=False)
        optimizer.step()
        if found is not None:
            losses.append(torch.stack(found).sum().item())  # as minipipe's Stage.step_loss sums them
            report("step", {"step": step, "loss": losses[-1]})
        steps.append(list(record))
        if counter is not None:
            per_step.append(counter.step(dp))
    lowered = (
        {r: [str(a) for a in acts] for r, acts in sorted(runtime.pipeline_order_with_comms.items())}
        if rank == 0
        else {}
    )
    return RuntimeRankResult(rank, losses, steps, lowered, per_step)


@dataclass
class RuntimeRun:
    plan: object  # minipipe's Plan: the schedule, the cut, the model
    csv: str  # what torch loaded
    losses: list[float]  # one per step: the full-batch mean loss
    traces: list  # a measured Trace per step: torch's forwards and backwards
    lowered: dict[int, list[str]]  # torch's per-rank stream, sends and receives added
    collectives: list[list[dict]]  # with FSDP: per global rank, per step: bytes sent (ring), buffers, counts


def runtime_runs(configs: list, progress=None) -> list[RuntimeRun]:
    """Train each RunConfig with torch's `_PipelineScheduleRuntime` loaded from the CSV of its
    schedule, all in one group of processes (gloo on the CPU)."""
    from ..engine import workers
    from ..engine.config import prepare
    from ..engine.workers import Job
    from .timeline import traces_from_events

    plans = [prepare(c.replace(device="cpu", backend="gloo")) for c in configs]
    for pl in plans:
        if pl.mesh.tp != 1 or pl.mesh.cp != 1:
            raise ValueError(
                f"runtime_runs runs pipelines, with FSDP inside the stages when dp > 1; got tp={pl.mesh.tp}, "
                f"cp={pl.mesh.cp}: torchtitan adds tensor parallelism with torch's parallelize_module and "
                f"context parallelism with its context_parallel, which are not shown here"
            )
    if len({pl.world for pl in plans}) > 1:
        raise ValueError("runtime_runs needs the same number of processes for every config; split them into calls")
    jobs = [
        Job((pl, to_csv(_for_fsdp(pl))), "gloo", (), pl.pin_cores, pl.config.timeout, pl.config.startup_timeout)
        for pl in plans
    ]
    results = workers.launch(jobs, plans[0].world, train_runtime_rank, progress)
    out = []
    for j, pl in enumerate(plans):
        ranks = [results[(j, r)] for r in range(pl.world)]
        first = [ranks[r] for r in pl.mesh.pipeline(0)]  # the first replica's pipeline
        traces = traces_from_events(pl.schedule, [res.events for res in first], "torch _PipelineScheduleRuntime")
        replicas = [res.losses for res in ranks if res.losses]  # each replica's mean over its share
        losses = [sum(step) / len(step) for step in zip(*replicas)]
        out.append(
            RuntimeRun(pl, jobs[j].work[1], losses, traces, ranks[0].lowered, [res.collectives for res in ranks])
        )
    return out


def _for_fsdp(plan) -> Schedule:
    """The schedule torch's runtime is given: as planned, or, where its stages are FSDP-sharded
    (dp > 1) and it writes its communication but not FSDP's actions, with them written too
    (torch adds none to a "compute_comms" schedule, and would compute on sharded stages)."""
    s = plan.schedule
    if plan.mesh.dp > 1 and csv_format(s) == "compute_comms" and not s.fsdp:
        return with_fsdp(s)
    return s
