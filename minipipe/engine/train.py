"""What every rank does: build its stages, then train for the configured steps.

The same function serves processes started by `minipipe.run` (one machine, a notebook or a
script) and by `torchrun` (many machines): the caller has already joined the process group
and passes a `report` callback for progress. A rank's parts (`RankStep`, its stages from
rank_stages.py) are built here for serving too (serve/rank.py): one way to build stages, whatever
the schedule. What a step's collectives sent is recorded by step_traffic.py; the failures tests
inject are faults.py's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..models.catalog import task_of
from ..parallel.accounting import Memory, optimizer_bytes, tensors_bytes
from ..parallel.context import shard_sequence
from ..parallel.data import GradReducer
from ..parallel.mesh import Coords, make_groups
from . import checkpoint
from .comm import clock_offset
from .config import Plan, is_writer
from .execute import Executor, StepRecord
from .experts import RoutingRecord, expert_parameter_ids
from .faults import fault_hook
from .rank_stages import DifferentModel, build_stages, by_layer, check_same_model, named_spec
from .step_traffic import AlignedClock, Collectives

# what this module gave before the stages' building, a step's traffic and the injected faults had modules of
# their own
__all__ = [
    "AlignedClock",
    "Collectives",
    "NonFiniteLoss",
    "RankResult",
    "RankStep",
    "train_steps",
    "DifferentModel",
    "build_stages",
    "by_layer",
    "check_same_model",
    "fault_hook",
]


@dataclass
class RankResult:
    """One rank's share of a run; launch.collect makes a RunResult of every rank's."""

    rank: int  # global rank
    coords: Coords  # (pp, dp, cp, ep, tp) on the mesh
    first_step: int  # the step the run began at (> 0 when it resumed)
    losses: list[float]  # per step; only ranks with the last stage have them
    records: list[tuple[int, StepRecord]]  # (step, what this rank saw) for each traced step
    state: dict  # this rank's layers' state_dict (its tp slices), named as in the model
    grads: dict | None  # this rank's gradients of the first step (config.return_grads)
    shards: dict  # name -> Shard: which of state/grads are tp slices
    peak_held: int  # most micro-batches (stage chunks) held at once, all stages together
    peak_bytes: int  # peak bytes of activations kept for backward, all stages together
    memory: Memory  # what this rank's memory held, by kind
    step_ms: list[float]  # wall time of each step, barrier to barrier (no flush: the whole run)
    weight_versions: int = 1  # most weight versions held at once (no flush: weight_stash.py)
    cpu_ms: float = 0.0  # CPU time of the process over the steps (all its threads, gloo's too)
    routing: dict | None = None  # the first step's router choices per MoE layer, micro-batch (return_grads)


def train_steps(plan: Plan, rank: int, report, status=None) -> RankResult:
    """Run the plan's flushed steps on this global rank; returns its share of the results
    (rank_job.train_rank chooses this or no_flush.train_no_flush)."""
    c, mesh = plan.config, plan.mesh
    torch.set_num_threads(c.threads)
    fault = fault_hook(c.fault, rank)
    me = RankStep(plan, rank, status, fault)
    named, where = me.named, me.where
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(list(named.values()), lr=c.lr)
    tp = (where.tp, mesh.tp)
    first = checkpoint.load(plan.resume_from, named, optimizer, tp, me.shards) if plan.resume_from else 0
    me.start(first)
    every = c.checkpoint_every or c.steps
    first_traced = c.steps - (c.trace_steps if c.trace_steps is not None else c.steps)

    losses, records, grads, starts = [], [], None, []
    routing, chosen = (RoutingRecord(me.stages, plan.partition) if c.return_grads else None), None
    cpu = time.process_time()
    for step in range(first, c.steps):
        starts.append(time.perf_counter())
        if routing and step == first:
            routing.start()
        record = me.step(step)
        if routing and step == first:
            chosen = routing.stop()
        if record.loss is not None and not math.isfinite(record.loss):
            raise NonFiniteLoss(
                f"the loss is {record.loss} at step {step}, the first that is not finite; training "
                f"stopped before this step's optimizer update, so no checkpoint holds it. Lower lr "
                f"(now {c.lr:g}), or look for values that overflow in the model or its data"
            )
        if c.return_grads and step == first:
            grads = {name: p.grad.detach().cpu().clone() for name, p in named.items() if p.grad is not None}
        optimizer.step()
        if record.loss is not None:
            losses.append(record.loss)
            if where.dp == 0 and where.cp == 0 and where.tp == 0:
                report("step", {"step": step, "loss": record.loss})
        if step >= first_traced:
            records.append((step, record))
        if c.checkpoint_dir and ((step + 1) % every == 0 or step + 1 == c.steps):
            checkpoint.save(
                c.checkpoint_dir,
                step + 1,
                rank,
                named,
                optimizer,
                plan.meta,
                before_finish=fault and (lambda s=step + 1: fault(s, "save")),
                writer=is_writer(where, mesh),
                tp=tp,
                spec=me.shards,
            )
    dist.barrier()
    starts.append(time.perf_counter())
    cpu = time.process_time() - cpu
    if status is not None:
        status(c.steps, 0, "done")
    memory = me.memory(optimizer)
    me.close()
    stages = me.stages
    return RankResult(
        rank,
        where,
        first,
        losses,
        records,
        state=by_layer(stages, plan.partition, lambda t: t.detach().cpu().clone(), state=True),
        grads=grads,
        shards=me.shards,
        peak_held=me.executor.peak_held,
        peak_bytes=memory.activations,
        memory=memory,
        step_ms=[1000 * (b - a) for a, b in zip(starts, starts[1:])],
        cpu_ms=1000 * cpu,
        routing=chosen,
    )


class RankStep:
    """One global rank's part of a plan, built: its stages (its tensor-parallel slices), its
    process groups, the gradient reducer of its data-parallel group and the executor.
    `step(n)` runs step n's forward and backward, gradients averaged — everything but the
    optimizer's step. train_steps drives it; so does the benchmark; serving (serve/rank.py) runs
    its executor over a forward-only plan."""

    def __init__(self, plan: Plan, rank: int, status=None, fault=None, trace: bool = True):
        c, mesh = plan.config, plan.mesh
        self.plan, self.rank, self.status, self.fault = plan, rank, status, fault
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if plan.device == "cuda" else torch.device("cpu")
        )
        self.where = mesh.coords(rank)
        groups = make_groups(mesh, timeout=c.timeout) if mesh.world > mesh.pp else None
        self.clock = AlignedClock()
        self.talk = Collectives(self.clock, mesh.tp, mesh.ep)
        self.task = task_of(c)
        self.stages = build_stages(
            plan,
            self.where.pp,
            self.task,
            self.device,
            groups,
            self.talk.tp_hook,
            self.talk.cp_hook,
            ep_hook=self.talk.ep_hook,
        )
        self.named = by_layer(self.stages, plan.partition, lambda p: p)  # "3.linear.weight" -> this rank's tensor
        self.shards = {
            name: sh for s, st in self.stages.items() for name, sh in named_spec(st.module, plan.partition, s).items()
        }
        # averaged over every rank with the same parameters and other tokens: dp × cp; with ep > 1
        # the experts over the ranks with the same experts, edp (engine/experts.py)
        experts = expert_parameter_ids(self.stages) if mesh.ep > 1 else set()
        dense = [p for p in self.named.values() if id(p) not in experts]
        replicas = groups.dp_cp if groups is not None else None
        self.reducer = (
            GradReducer(
                dense,
                replicas.group,
                plan.schedule.m,
                bucket_bytes=c.dp_bucket_bytes,
                overlap=c.dp_overlap,
                timeout=c.timeout,
                clock=self.clock,
                name=f"dp group of ranks {list(replicas.ranks)}",
            )
            if replicas is not None and replicas.size > 1 and dense
            else None
        )
        self.expert_reducer = (
            GradReducer(
                [p for p in self.named.values() if id(p) in experts],
                groups.edp.group,
                plan.schedule.m,
                bucket_bytes=c.dp_bucket_bytes,
                overlap=c.dp_overlap,
                timeout=c.timeout,
                clock=self.clock,
                divide_by=mesh.size("dp_cp"),
                name=f"edp group of ranks {list(groups.edp.ranks)}",
            )
            if experts
            else None
        )
        self.executor = Executor(
            self.where.pp,
            plan.schedule,
            self.stages,
            plan.shapes,
            self.device,
            plan.in_order,
            c.timeout,
            clock=self.clock,
            status=status,
            before_action=fault,
            to_global=mesh.pipeline(rank),
            trace=trace,
            stage_step=_step_hook(c),
        )
        self.needs_inputs = any(st.is_first for st in self.stages.values())
        self.needs_targets = any(st.is_last for st in self.stages.values())

    def start(self, first_step: int = 0) -> None:
        """Before the first step: line up the clocks with rank 0's (every rank calls it)."""
        if self.fault:
            self.fault(first_step, "start")  # a rank that is slow to start, before the ranks first talk
        if self.status is not None:
            self.status(first_step, -1, "barrier")  # built: waiting for the others, to line up the clocks
        plan = self.plan
        self.clock.offset = clock_offset(
            self.rank, plan.mesh.world, self.device if plan.backend == "nccl" else None
        )  # gloo sends host memory

    def step(self, step: int) -> StepRecord:
        mesh, m = self.plan.mesh, self.plan.schedule.m
        x, y = (t.chunk(mesh.dp)[self.where.dp] for t in self.task.batch(step))  # this replica's share
        x, y = (shard_sequence(t, mesh.cp, self.where.cp) for t in (x, y))  # its share of each sequence
        inputs = [t.to(self.device) for t in x.chunk(m)] if self.needs_inputs else None
        targets = [t.to(self.device) for t in y.chunk(m)] if self.needs_targets else None
        for p in self.named.values():
            p.grad = None
        self.talk.reset()
        for reducer in self.reducers:
            reducer.reset()
        if self.executor.trace:  # every step starts together, so its trace is one clean picture
            if self.status is not None:
                self.status(step, -1, "barrier")
            dist.barrier()  # untraced (the benchmark's steps), nothing needs the ranks lined up
        record = self.executor.step(step, inputs, targets)
        for reducer in self.reducers:
            reducer.finish()
        self.talk.add_to(record, *self.reducers)
        return record

    @property
    def reducers(self) -> list[GradReducer]:
        return [r for r in (self.reducer, self.expert_reducer) if r is not None]

    def memory(self, optimizer=None) -> Memory:
        """What this rank's memory holds now, by kind."""
        return Memory(
            parameters=tensors_bytes(self.named.values()),
            gradients=tensors_bytes(p.grad for p in self.named.values()),
            optimizer=optimizer_bytes(optimizer) if optimizer is not None else 0,
            activations=max((st.held.peak for st in self.stages.values()), default=0),
            dp_buckets=sum(r.buffer_bytes for r in self.reducers),
            device_peak=torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None,
        )

    def close(self) -> None:
        for reducer in self.reducers:
            reducer.close()


class NonFiniteLoss(ArithmeticError):
    """A step's loss is NaN or infinite: the run stops there rather than train on garbage."""

    plain = True  # the message says it all; the watchdog leaves the traceback out


def _step_hook(c):
    """A training run's stage_step hook, unwrapped (custom.Sendable); serving has none."""
    step = getattr(c, "stage_step", None)
    return getattr(step, "factory", step)
