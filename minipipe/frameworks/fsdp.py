"""FSDP for real: torch's `fully_shard` (FSDP2) on gloo, on the course model, beside minipipe's
data parallelism and pipeline; and FSDP inside each pipeline stage, as torchtitan composes them.

    run = fsdp_run(RunConfig(p=1, dp=2, m=1, model="gpt", steps=4))   # 2 ranks, each 1/2 of everything
    run.losses, run.step_ms, run.memory[0], run.collectives[-1]
    formula_bytes(task.layers(), n=2)         # what each rank sends per step, by collective (ring)

What FSDP does, in the course's words: it is data parallelism (each rank a share of the batch) in
which every rank keeps only 1/n of each parameter, gradient and optimizer state — "sharded". Each
`fully_shard`-ed module (here: every layer, as torchtitan wraps every transformer block) is one
unit: before its forward the ranks all-gather its parameters (the whole unit, for a moment), after
its backward they reduce-scatter its gradients (each rank keeps the averaged 1/n it owns). With
`reshard_after_forward=True` (the default) the gathered parameters are dropped after the forward
and gathered again for the backward: two all-gathers per unit per step. In a ring, each rank sends
(n−1)/n of the gathered (or reduced) buffer per collective — half an all-reduce each.

What is measured, and what is derived: FSDP's own hooks for its collectives
(`set_custom_all_gather`, `set_custom_reduce_scatter`, with torch's default implementations inside)
see each buffer FSDP hands a collective, so the calls and the buffers' bytes are measured (a step's
`collectives[...]["buffers"]`). What a rank then puts on the wire is gloo's business and is not
observed here: the bytes sent (`collectives[...]["all-gather"]`, `["reduce-scatter"]`) are the ring
formula, (n−1)/n of each measured buffer. `formula_bytes` derives the same from the parameters'
shapes alone (FSDP pads each parameter's first dimension to a multiple of n), which checks the
buffers FSDP really made against the shapes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..parallel.accounting import Memory
from ..traffic import ring_bytes

KINDS = ("all-gather", "reduce-scatter")


def ring_share(nbytes: float, n: int) -> float:
    """Bytes each of n ranks sends in a ring all-gather or reduce-scatter of an `nbytes` buffer:
    (n−1)/n of it, half of a ring all-reduce."""
    return ring_bytes("all-gather", nbytes, n)


def unit_bytes(module, n: int) -> int:
    """Bytes of one FSDP unit's parameters as FSDP gathers them: each parameter's first dimension
    padded to a multiple of n (so that it splits into n equal shards)."""
    total = 0
    for q in module.parameters():
        rows = q.shape[0] if q.dim() else 1
        total += math.ceil(rows / n) * n * (q.numel() // max(rows, 1)) * q.element_size()
    return total


def formula_bytes(units: list, n: int, reshard_after_forward: bool = True) -> dict[str, float]:
    """What each of n ranks sends in one training step, by collective, for these FSDP units
    (fully_shard-ed modules, each holding its own parameters)."""
    gathers = 2 if reshard_after_forward else 1  # forward, and again for the backward
    return {
        "all-gather": sum(gathers * ring_share(unit_bytes(u, n), n) for u in units),
        "reduce-scatter": sum(ring_share(unit_bytes(u, n), n) for u in units),
    }


class Counter:
    """The collectives FSDP runs, as (kind, bytes of the whole buffer), appended as they start."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def buffers(self) -> dict[str, int]:
        """Bytes of the buffers handed to the calls so far, by kind (measured)."""
        return {kind: sum(nbytes for k, nbytes in self.calls if k == kind) for kind in KINDS}

    def sent(self, n: int) -> dict[str, float]:
        """Bytes this rank sends, by kind, for the calls so far: the ring formula on each buffer."""
        out = dict.fromkeys(KINDS, 0.0)
        for kind, nbytes in self.calls:
            out[kind] += ring_share(nbytes, n)
        return out

    def count(self) -> dict[str, int]:
        return {kind: sum(1 for k, _ in self.calls if k == kind) for kind in KINDS}

    def step(self, n: int) -> dict:
        """A step's record: bytes sent by kind (ring formula), "buffers" (measured) and "count"."""
        return {**self.sent(n), "buffers": self.buffers(), "count": self.count()}


def shard(module, mesh, counter: Counter, reshard_after_forward: bool = True):
    """fully_shard every child of `module` (one unit per layer), then `module` itself, on `mesh`
    (a 1-D DeviceMesh), with every collective counted in `counter`. Returns the units."""
    import warnings

    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    # FSDP warns that a unit returns a view (a Linear on a 3-d input does); nothing here writes into
    # one in place, which is what the warning is about
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")

    class CountedAllGather(DefaultAllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            counter.calls.append(("all-gather", output_tensor.numel() * output_tensor.element_size()))
            return super().__call__(output_tensor, input_tensor, group, async_op)

    class CountedReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            counter.calls.append(("reduce-scatter", input_tensor.numel() * input_tensor.element_size()))
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    units = [fully_shard(child, mesh=mesh, reshard_after_forward=reshard_after_forward) for child in module.children()]
    fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    for unit in [*units, module]:
        unit.set_custom_all_gather(CountedAllGather())
        unit.set_custom_reduce_scatter(CountedReduceScatter())
    return units


def local_bytes(tensors) -> int:
    """Bytes this rank holds of (possibly sharded) tensors: a DTensor counts its local shard."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


@dataclass
class FsdpRankResult:
    rank: int
    losses: list[float]  # per step: the mean loss over this rank's share of the batch
    step_ms: list[float]  # per step, barrier to end of the optimizer step
    memory: Memory  # what this rank held, by kind (activations: peak kept for backward)
    gathered: int  # the largest unit's gathered parameters (held only around its use)
    collectives: list[dict] = field(default_factory=list)  # per step: Counter.step


def train_fsdp_rank(work, rank: int, report, status=None) -> FsdpRankResult:
    """A worker body: the whole model, every layer fully_shard-ed over all ranks, trained on this
    rank's share of each batch."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from ..engine.stage import SavedBytes
    from ..models.catalog import task_of

    config, reshard = work
    n = dist.get_world_size()
    torch.set_num_threads(config.threads)
    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    counter = Counter()
    shard(model, init_device_mesh("cpu", (n,)), counter, reshard)
    optimizer = (torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=config.lr)
    losses, times, per_step, kept, grads = [], [], [], 0, 0
    for step in range(config.steps):
        if status is not None:
            status(step, -1, "compute")
        x, y = (t.chunk(n)[rank] for t in task.batch(step))
        counter.calls.clear()
        dist.barrier()
        start = time.perf_counter()
        saved = SavedBytes(set())  # activations: what autograd keeps that is no parameter
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t if _is_parameter(t) else saved.pack(t), saved.unpack):
            loss = task.loss(model(x), y)
        loss.backward()
        grads = local_bytes(q.grad for q in model.parameters())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(1000 * (time.perf_counter() - start))
        kept = max(kept, saved.total)
        losses.append(loss.item())
        per_step.append(counter.step(n))
        if rank == 0:
            report("step", {"step": step, "loss": losses[-1]})  # its share's, as minipipe's replicas report
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]  # with Adam's step counts
    memory = Memory(
        parameters=local_bytes(model.parameters()), gradients=grads, optimizer=local_bytes(state), activations=kept
    )
    gathered = max(nbytes for kind, nbytes in counter.calls if kind == "all-gather")
    return FsdpRankResult(rank, losses, times, memory, gathered, per_step)


def _is_parameter(t) -> bool:
    """A (gathered) parameter or a view of one (a Linear saves its weight transposed): the model's
    memory, not the micro-batch's."""
    import torch

    return isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter)


@dataclass
class FsdpRun:
    config: object
    losses: list[float]  # one per step: the mean loss over the global batch (the ranks' mean)
    step_ms: list[float]  # per step, on rank 0
    memory: list[Memory]  # per rank, by kind
    gathered: list[int]  # per rank: the largest unit, gathered
    collectives: list[dict]  # per step, rank 0: bytes sent by kind (ring), "buffers" (measured), "count"
    formula: dict  # the bytes sent formula_bytes gives for this model and n


def fsdp_run(config, reshard_after_forward: bool = True, progress=None) -> FsdpRun:
    """Train a RunConfig with FSDP2 on config.dp processes (p = tp = 1: FSDP has no stages), every
    layer one unit; gloo on the CPU."""
    from ..engine import workers
    from ..engine.run_checks import check_timeouts
    from ..engine.workers import Job
    from ..models.catalog import task_of

    if config.p != 1 or config.tp != 1 or config.cp != 1 or config.dp < 2:
        raise ValueError(
            f"fsdp_run shards over dp ranks and has no stages: use p=1, tp=1, dp >= 2; got p={config.p}, "
            f"dp={config.dp}, cp={config.cp}, tp={config.tp} (pp_fsdp_runs puts FSDP inside pipeline stages)"
        )
    if config.batch_size % config.dp:
        raise ValueError(f"batch_size={config.batch_size} must split into dp={config.dp} equal shares")
    check_timeouts(config)
    job = Job((config, reshard_after_forward), "gloo", (), config.pin_cores, config.timeout, config.startup_timeout)
    results = workers.launch([job], config.dp, train_fsdp_rank, progress)
    ranks = [results[(0, r)] for r in range(config.dp)]
    units = list(task_of(config).layers())
    losses = [sum(step) / len(step) for step in zip(*(r.losses for r in ranks))]  # equal shares: as minipipe's dp
    return FsdpRun(
        config,
        losses,
        ranks[0].step_ms,
        [r.memory for r in ranks],
        [r.gathered for r in ranks],
        ranks[0].collectives,
        formula_bytes(units, config.dp, reshard_after_forward),
    )
