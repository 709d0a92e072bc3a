"""`run`: train on p processes on this machine, and bring the results back to the caller.

    from minipipe import run, RunConfig
    result = run(RunConfig(schedule="1f1b", p=2, m=4, steps=20))
    result.losses, result.traces[-1].bubble(), result.state

Works from a script or a notebook cell. The processes, their watchdog and the diagnosis of a
failure are workers.py's: if a worker raises, dies or stops responding, the others are stopped,
no process is left behind, and `run` raises WorkerError naming the rank, the step and the
action it was on. Each rank returns a train.RankResult; `collect` makes them one RunResult.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..models.catalog import task_of
from ..parallel.accounting import Memory
from ..parallel.mesh import Coords
from ..parallel.tensor import unshard
from ..trace import Trace
from . import workers
from .config import Plan, RunConfig, is_writer, prepare
from .execute import measured_trace
from .folder_lock import holding
from .rank_job import train_rank
from .train import RankResult
from .workers import Job, tell

__all__ = ["run", "run_many", "RunResult", "collect", "job_of"]


@dataclass
class RunResult:
    config: RunConfig
    plan: Plan
    losses: list[float]  # one per step run: the mean loss over the global batch
    first_step: int  # the step the run began at (> 0 when it resumed)
    traces: list[Trace]  # measured, one per traced step (of the first pipeline: dp 0, tp 0)
    state: dict  # the trained model's state_dict, as nn.Sequential(*task.layers())
    grads: dict | None  # gradients of the first step (config.return_grads)
    peak_held: list[int]  # per global rank: most micro-batches (stage chunks) held at once
    peak_bytes: list[int]  # per global rank: peak bytes of activations kept for backward
    step_ms: list[float]  # wall time of each step on rank 0, barrier to barrier
    slices: list[list[Trace]] = field(default_factory=list)  # per pipeline of the mesh (Mesh.pipeline_of), its traces
    memory: list[Memory] = field(default_factory=list)  # per global rank, by kind
    coords: list[Coords] = field(default_factory=list)  # per global rank: (pp, dp, cp, ep, tp)
    weight_versions: list[int] = field(default_factory=list)  # per global rank: most weight versions held at once
    cpu_ms: list[float] = field(default_factory=list)  # per global rank: CPU time over the steps (all threads)
    routing: dict | None = None  # return_grads: {MoE layer: {(dp, cp, micro-batch): (choices, slots)}}, first step

    def traffic(self, step: int = -1) -> list[dict]:
        """Bytes each global rank sent in a traced step (the last by default), by kind."""
        mesh = self.plan.mesh
        return [self.slices[mesh.pipeline_of(r)][step].traffic[mesh.coords(r).pp] for r in mesh.ranks()]

    def model(self):
        """The trained model, whole, on one process."""
        model = torch.nn.Sequential(*task_of(self.config).layers())
        model.load_state_dict(self.state)
        return model


def run(config: RunConfig | None = None, progress: Callable[[dict], None] | None = None, **changes) -> RunResult:
    """Train `config` (or RunConfig(**changes)) on p local processes; see the module docstring."""
    config = (config or RunConfig()).replace(**changes) if changes or config is None else config
    return run_many([config], progress)[0]


def run_many(configs: list[RunConfig], progress=None) -> list[RunResult]:
    """Several runs with the same p in one group of processes (starting one costs seconds)."""
    if not configs:
        return []
    plans = [prepare(c) for c in configs]
    world = plans[0].world
    if any(pl.world != world or (pl.backend, pl.gpus) != (plans[0].backend, plans[0].gpus) for pl in plans):
        raise ValueError(
            "run_many needs the same number of processes (p·dp·cp·tp), device and backend for every "
            "config; split them into separate calls"
        )
    with holding(plans):  # each checkpoint folder this run's alone while it runs
        tell(plans[0].note, progress)
        results = workers.launch([job_of(pl) for pl in plans], world, train_rank, progress)
    return [collect(pl, [results[(j, r)] for r in range(world)]) for j, pl in enumerate(plans)]


def job_of(plan: Plan) -> Job:
    """What the worker processes need to know to run a plan."""
    c = plan.config
    return Job(plan, plan.backend, plan.gpus, plan.pin_cores, c.timeout, c.startup_timeout, plan.schedule, plan.mesh)


def collect(plan: Plan, ranks: list[RankResult]) -> RunResult:
    """One RunResult from every global rank's RankResult (listed by rank): one trace per pipeline
    slice and step, the losses averaged over the data-parallel replicas, the tensor-parallel
    slices of the weights and gradients put back together."""
    mesh = plan.mesh
    step_ms = dict(enumerate(ranks[0].step_ms))
    slices = []
    for pipeline in mesh.groups("pp"):
        by_step: dict[int, dict] = {}
        for q, r in enumerate(pipeline):
            for step, rec in ranks[r].records:
                by_step.setdefault(step, {})[q] = rec
        slices.append(
            [
                measured_trace(
                    plan.schedule,
                    [by_step[step][q] for q in sorted(by_step[step])],
                    {"device": plan.device, "backend": plan.backend, "where": plan.where, "step_ms": step_ms.get(step)},
                    step=step,
                )
                for step in sorted(by_step)
            ]
        )
    coords = [Coords(*res.coords) for res in ranks]
    replicas = [res.losses for res, at in zip(ranks, coords) if res.losses and at.tp == 0]
    losses = [sum(step) / len(step) for step in zip(*replicas)]
    writers = [res for res, at in zip(ranks, coords) if is_writer(at, mesh)]  # they hold every distinct slice
    return RunResult(
        plan.config,
        plan,
        losses,
        ranks[0].first_step,
        slices[0],
        _whole(writers, lambda res: res.state),
        _whole(writers, lambda res: res.grads or {}) or None,
        [res.peak_held for res in ranks],
        [res.peak_bytes for res in ranks],
        ranks[0].step_ms,
        slices=slices,
        memory=[res.memory for res in ranks],
        coords=coords,
        weight_versions=[res.weight_versions for res in ranks],
        cpu_ms=[res.cpu_ms for res in ranks],
        routing=_routing(ranks, coords),
    )


def _routing(ranks: list[RankResult], coords: list[Coords]) -> dict | None:
    """Every MoE layer's first-step choices, by (dp, cp, micro-batch): the tokens' groups (tp ranks
    route the same tokens alike: tp 0's)."""
    out: dict = {}
    for res, at in zip(ranks, coords):
        for name, by_mb in (res.routing or {}).items():
            if at.tp == 0:
                out.setdefault(name, {}).update({(at.dp, at.cp, mb): chosen for mb, chosen in by_mb.items()})
    return out or None


def _whole(ranks: list[RankResult], part) -> dict:
    """Tensors by name in the whole model, from the ranks' parts (tp slices put back together)."""
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    shards = {}
    for res in ranks:
        shards.update(res.shards)
        for name, t in part(res).items():
            pieces.setdefault(name, {})[Coords(*res.coords).tp] = t
    return {
        name: unshard([by_tp[i] for i in sorted(by_tp)], shards[name]) if name in shards else by_tp[min(by_tp)]
        for name, by_tp in pieces.items()
    }
