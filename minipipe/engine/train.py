"""What every rank does: build its stages, then train for the configured steps.

The same function serves processes started by `minipipe.run` (one machine, a notebook or a
script) and by `torchrun` (many machines): the caller has already joined the process group
and passes a `report` callback for progress. A rank's parts (`RankStep`, `build_stages`) are
built here for serving too (serve/rank.py): one way to build stages, whatever the schedule.
"""
from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..models.catalog import task_of
from ..parallel.accounting import Memory, optimizer_bytes, tensors_bytes
from ..parallel.context import context_parallel, shard_sequence, zigzag_positions
from ..parallel.data import GradReducer
from ..parallel.mesh import Coords, make_groups
from ..parallel.ring_attention import CPGroup
from ..parallel.tensor import shard_spec, tensor_parallel
from ..sim.recompute_costs import parse as parse_recompute
from ..traffic import TrafficKind, ring_bytes
from . import checkpoint
from .comm import clock_offset
from .config import Plan, is_writer
from .execute import Executor, StepRecord
from .experts import RoutingRecord, expert_parameter_ids, split_experts
from .partition import Partition, stage_module
from .recomputing_stage import RecomputingStage
from .stage import HeldBytes, Stage


@dataclass
class RankResult:
    """One rank's share of a run; launch.collect makes a RunResult of every rank's."""

    rank: int                               # global rank
    coords: Coords                          # (pp, dp, cp, ep, tp) on the mesh
    first_step: int                         # the step the run began at (> 0 when it resumed)
    losses: list[float]                     # per step; only ranks with the last stage have them
    records: list[tuple[int, StepRecord]]   # (step, what this rank saw) for each traced step
    state: dict                             # this rank's layers' state_dict (its tp slices), named as in the model
    grads: dict | None                      # this rank's gradients of the first step (config.return_grads)
    shards: dict                            # name -> Shard: which of state/grads are tp slices
    peak_held: int                          # most micro-batches (stage chunks) held at once, all stages together
    peak_bytes: int                         # peak bytes of activations kept for backward, all stages together
    memory: Memory                          # what this rank's memory held, by kind
    step_ms: list[float]                    # wall time of each step, barrier to barrier (no flush: the whole run)
    weight_versions: int = 1                # most weight versions held at once (no flush: weight_stash.py)
    cpu_ms: float = 0.0                     # CPU time of the process over the steps (all its threads, gloo's too)
    routing: dict | None = None             # the first step's router choices per MoE layer, micro-batch (return_grads)


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
            raise NonFiniteLoss(f"the loss is {record.loss} at step {step}, the first that is not finite; training "
                                f"stopped before this step's optimizer update, so no checkpoint holds it. Lower lr "
                                f"(now {c.lr:g}), or look for values that overflow in the model or its data")
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
            checkpoint.save(c.checkpoint_dir, step + 1, rank, named, optimizer, plan.meta,
                            before_finish=fault and (lambda s=step + 1: fault(s, "save")),
                            writer=is_writer(where, mesh), tp=tp, spec=me.shards)
    dist.barrier()
    starts.append(time.perf_counter())
    cpu = time.process_time() - cpu
    if status is not None:
        status(c.steps, 0, "done")
    memory = me.memory(optimizer)
    me.close()
    stages = me.stages
    return RankResult(rank, where, first, losses, records,
                      state=by_layer(stages, plan.partition, lambda t: t.detach().cpu().clone(), state=True),
                      grads=grads, shards=me.shards,
                      peak_held=me.executor.peak_held,
                      peak_bytes=memory.activations, memory=memory,
                      step_ms=[1000 * (b - a) for a, b in zip(starts, starts[1:])], cpu_ms=1000 * cpu,
                      routing=chosen)


class RankStep:
    """One global rank's part of a plan, built: its stages (its tensor-parallel slices), its
    process groups, the gradient reducer of its data-parallel group and the executor.
    `step(n)` runs step n's forward and backward, gradients averaged — everything but the
    optimizer's step. train_steps drives it; so does the benchmark; serving (serve/rank.py) runs
    its executor over a forward-only plan."""

    def __init__(self, plan: Plan, rank: int, status=None, fault=None, trace: bool = True):
        c, mesh = plan.config, plan.mesh
        self.plan, self.rank, self.status, self.fault = plan, rank, status, fault
        self.device = torch.device("cuda", torch.cuda.current_device()) if plan.device == "cuda" \
            else torch.device("cpu")
        self.where = mesh.coords(rank)
        groups = make_groups(mesh, timeout=c.timeout) if mesh.world > mesh.pp else None
        self.clock = AlignedClock()
        self.talk = Collectives(self.clock, mesh.tp, mesh.ep)
        self.task = task_of(c)
        self.stages = build_stages(plan, self.where.pp, self.task, self.device, groups, self.talk.tp_hook,
                                   self.talk.cp_hook, ep_hook=self.talk.ep_hook)
        self.named = by_layer(self.stages, plan.partition, lambda p: p)   # "3.linear.weight" -> this rank's tensor
        self.shards = {name: sh for s, st in self.stages.items()
                       for name, sh in _named_spec(st.module, plan.partition, s).items()}
        # averaged over every rank with the same parameters and other tokens: dp × cp; with ep > 1
        # the experts over the ranks with the same experts, edp (engine/experts.py)
        experts = expert_parameter_ids(self.stages) if mesh.ep > 1 else set()
        dense = [p for p in self.named.values() if id(p) not in experts]
        replicas = groups.dp_cp if groups is not None else None
        self.reducer = GradReducer(dense, replicas.group, plan.schedule.m,
                                   bucket_bytes=c.dp_bucket_bytes, overlap=c.dp_overlap, timeout=c.timeout,
                                   clock=self.clock, name=f"dp group of ranks {list(replicas.ranks)}") \
            if replicas is not None and replicas.size > 1 and dense else None
        self.expert_reducer = GradReducer([p for p in self.named.values() if id(p) in experts], groups.edp.group,
                                          plan.schedule.m, bucket_bytes=c.dp_bucket_bytes, overlap=c.dp_overlap,
                                          timeout=c.timeout, clock=self.clock, divide_by=mesh.size("dp_cp"),
                                          name=f"edp group of ranks {list(groups.edp.ranks)}") if experts else None
        self.executor = Executor(self.where.pp, plan.schedule, self.stages, plan.shapes, self.device, plan.in_order,
                                 c.timeout, clock=self.clock, status=status, before_action=fault,
                                 to_global=mesh.pipeline(rank), trace=trace,
                                 stage_step=_step_hook(c))
        self.needs_inputs = any(st.is_first for st in self.stages.values())
        self.needs_targets = any(st.is_last for st in self.stages.values())

    def start(self, first_step: int = 0) -> None:
        """Before the first step: line up the clocks with rank 0's (every rank calls it)."""
        if self.fault:
            self.fault(first_step, "start")      # a rank that is slow to start, before the ranks first talk
        if self.status is not None:
            self.status(first_step, -1, "barrier")    # built: waiting for the others, to line up the clocks
        plan = self.plan
        self.clock.offset = clock_offset(self.rank, plan.mesh.world,
                                         self.device if plan.backend == "nccl" else None)   # gloo sends host memory

    def step(self, step: int) -> StepRecord:
        mesh, m = self.plan.mesh, self.plan.schedule.m
        x, y = (t.chunk(mesh.dp)[self.where.dp] for t in self.task.batch(step))   # this replica's share
        x, y = (shard_sequence(t, mesh.cp, self.where.cp) for t in (x, y))          # its share of each sequence
        inputs = [t.to(self.device) for t in x.chunk(m)] if self.needs_inputs else None
        targets = [t.to(self.device) for t in y.chunk(m)] if self.needs_targets else None
        for p in self.named.values():
            p.grad = None
        self.talk.reset()
        for reducer in self.reducers:
            reducer.reset()
        if self.executor.trace:   # every step starts together, so its trace is one clean picture
            if self.status is not None:
                self.status(step, -1, "barrier")
            dist.barrier()       # untraced (the benchmark's steps), nothing needs the ranks lined up
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
        return Memory(parameters=tensors_bytes(self.named.values()),
                      gradients=tensors_bytes(p.grad for p in self.named.values()),
                      optimizer=optimizer_bytes(optimizer) if optimizer is not None else 0,
                      activations=max((st.held.peak for st in self.stages.values()), default=0),
                      dp_buckets=sum(r.buffer_bytes for r in self.reducers),
                      device_peak=torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None)

    def close(self) -> None:
        for reducer in self.reducers:
            reducer.close()


class AlignedClock:
    """perf_counter on rank 0's time line (comm.clock_offset), for every record of a step."""

    def __init__(self):
        self.offset = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.offset


class Collectives:
    """What this rank's collectives sent in a step, and when: the tensor-parallel layers' hook and
    ring attention's (called with perf_counter times) and, at the step's end, the gradient
    reducer's buckets."""

    def __init__(self, clock: AlignedClock, tp: int, ep: int = 1):
        self.clock, self.tp, self.ep = clock, tp, ep
        self.reset()

    def reset(self) -> None:
        self.events: list[tuple[TrafficKind, float, float, float]] = []

    def tp_hook(self, kind: TrafficKind, nbytes: int, start: float, end: float) -> None:
        self.events.append((kind, ring_bytes(kind, nbytes, self.tp),
                            start + self.clock.offset, end + self.clock.offset))

    def cp_hook(self, kind: TrafficKind, nbytes: int, start: float, end: float) -> None:
        """A ring attention step: `nbytes` passed on to the next cp rank."""
        self.events.append((kind, float(nbytes), start + self.clock.offset, end + self.clock.offset))

    def ep_hook(self, kind: TrafficKind, nbytes: int, start: float, end: float) -> None:
        """An all-to-all of `nbytes` over the ep group: (ep−1)/ep of it sent."""
        self.events.append((kind, ring_bytes(kind, nbytes, self.ep),
                            start + self.clock.offset, end + self.clock.offset))

    def add_to(self, record: StepRecord, *reducers) -> None:
        events = list(self.events)
        for reducer in reducers:     # an edp group of one rank only divides: nothing sent, nothing to draw
            if reducer is not None and reducer.size > 1:
                events += [(TrafficKind.DP_ALL_REDUCE, r.sent_bytes, r.launched_at, r.completed_at)
                           for r in reducer.records]
        for kind, nbytes, _, _ in events:
            record.sent[kind] = record.sent.get(kind, 0) + nbytes
        record.collectives = events


class NonFiniteLoss(ArithmeticError):
    """A step's loss is NaN or infinite: the run stops there rather than train on garbage."""
    plain = True          # the message says it all; the watchdog leaves the traceback out


class DifferentModel(ValueError):
    """This process built other layers than the plan was made from: the ranks would disagree on
    every message's size (gloo: a size mismatch, then an abort)."""
    plain = True


def check_same_model(layers, plan: Plan, q: int) -> None:
    """The layers this rank built are the plan's: as many, with the same parameter shapes."""
    built = {n: tuple(p.shape) for n, p in nn.Sequential(*layers).named_parameters()}
    planned = {n: tuple(s) for n, s in plan.meta.get("param_shapes", built).items()}
    wrong = [f"{len(layers)} layers, the plan {len(plan.layer_shapes) - 1}"] \
        if plan.layer_shapes and len(layers) != len(plan.layer_shapes) - 1 else \
        [f"{n} is {built.get(n, 'missing')} here, {planned.get(n, 'missing')} in the plan"
         for n in sorted(set(built) | set(planned)) if built.get(n) != planned.get(n)][:3]
    if wrong:
        raise DifferentModel(f"pipeline rank {q} built a different model than the one the run was planned with "
                             f"({'; '.join(wrong)}). layers() must build the same layers on every process: from "
                             f"the seed and model_args alone (no unseeded randomness, clock, process id or "
                             f"machine-dependent files)")


def build_stages(plan: Plan, q: int, task, device, groups=None, hook=None, cp_hook=None, *,
                 ep_hook=None) -> dict[int, Stage]:
    """Pipeline rank q's stages, for training and serving alike. Every rank builds all layers
    from the seed, so the weights are those of the one-process model (or the plan's `state`,
    loaded: the weights a serving run serves), then keeps its own — with tensor parallelism, its
    slice of each split layer (parallel/tensor.py); with context parallelism, each layer made to
    work on its share of every sequence (parallel/context.py: ring attention); with expert
    parallelism, its share of each mixture-of-experts layer's experts (engine/experts.py). `hook`,
    `cp_hook` and `ep_hook` hear the tensor-parallel collectives, the ring attention steps and the
    all-to-alls. A forward-only schedule's stages are in eval mode: they serve."""
    layers, schedule = task.layers(), plan.schedule
    check_same_model(layers, plan, q)
    if plan.state is not None:
        nn.Sequential(*layers).load_state_dict(plan.state)
    if groups is not None and groups.tp.size > 1:
        layers = [tensor_parallel(layer, groups.tp.index, groups.tp.size, groups.tp.group, hook, plan.config.timeout)
                  for layer in layers]
    if groups is not None and groups.cp.size > 1:
        cp = CPGroup(groups.cp.group, groups.cp.index, groups.cp.size, cp_hook, plan.config.timeout)
        positions = zigzag_positions(plan.layer_shapes[0][0][1] * cp.size, cp.size, cp.rank)
        layers = [context_parallel(layer, cp, positions) for layer in layers]
    layers = split_experts(layers, groups, schedule.m, ep_hook, plan.config.timeout)
    # one count for the rank
    held, recompute = HeldBytes(), parse_recompute(getattr(plan.config, "recompute", "none"), len(layers))
    per_update = schedule.m if schedule.updates is None else schedule.updates.per_update   # the losses' divisor

    def stage(s: int) -> Stage:
        module = stage_module(layers, plan.partition, s).to(device)
        common = dict(split_backward=schedule.splits_backward(s), held=held)
        if not recompute.on:
            return Stage(s, module, schedule.n_stages, per_update, task.loss, **common)
        return RecomputingStage(s, module, schedule.n_stages, per_update, task.loss, **common,
                                flags=recompute.of_stage(plan.partition.layers_of(s)),
                                per_layer=recompute.mode == "layers")
    stages = {s: stage(s) for s in schedule.stages_of(q)}
    for st in stages.values():
        st.module.train(not schedule.forward_only)
    return stages


def _named_spec(module: nn.Module, cut: Partition, stage: int) -> dict:
    """shard_spec of a stage, named as in the whole model."""
    return {f"{cut.layers_of(stage)[int(name.split('.', 1)[0])]}.{name.split('.', 1)[1]}": sh
            for name, sh in shard_spec(module).items()}


def by_layer(stages: dict, cut: Partition, fn, state: bool = False) -> dict:
    """Name tensors as in `nn.Sequential(*task.layers())`: '<layer index>.<name>'."""
    out = {}
    for s, st in stages.items():
        items = st.module.state_dict().items() if state else st.module.named_parameters()
        for name, t in items:
            local, rest = name.split(".", 1)
            out[f"{cut.layers_of(s)[int(local)]}.{rest}"] = fn(t)
    return out


def _step_hook(c):
    """A training run's stage_step hook, unwrapped (custom.Sendable); serving has none."""
    step = getattr(c, "stage_step", None)
    return getattr(step, "factory", step)


def fault_hook(fault: dict | None, rank: int):
    """Tests inject failures here: raise, exit, or stop responding at a chosen action (or at
    "save": while writing the checkpoint of that step; at "start": before the ranks first talk)."""
    if not fault or fault.get("rank") != rank:
        return None

    def before(step, action):
        if step == fault.get("step", 0) and str(action) == fault.get("action", str(action)):
            if fault.get("once") and not _first_time(fault["once"]):
                return                     # fired already, in an earlier attempt of this run
            kind = fault.get("kind", "raise")
            if kind == "raise":
                raise RuntimeError(f"injected fault at {action}")
            if kind == "exit":
                os._exit(3)
            if kind == "kill":             # as the OOM killer or a lost node would: no exit code, no cleanup
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "sleep":
                time.sleep(fault.get("seconds", 3600))
    return before


def _first_time(marker: str) -> bool:
    """Make `marker`; False if it was there already."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
