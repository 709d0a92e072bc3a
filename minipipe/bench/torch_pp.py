"""PyTorch's own pipelining (`torch.distributed.pipelining`) on minipipe's stages: the yardstick
for `minipipe bench`.

Call it inside a worker process whose default process group is already up (one process per
rank, gloo or NCCL). Every rank builds the same pipeline with its own stages:

    pipe = TorchPipeline("1f1b", {rank: stage_module}, num_stages=2, n_microbatches=8,
                         loss_fn=task.loss)
    x, y = task.batch(step)          # the global batch, the same on every rank
    loss = pipe.step(x, y)           # full-batch mean loss on the last stage's rank, else None

What one `step` does: zero this rank's gradients (set to None), split the batch into m equal
micro-batches, run torch's schedule (forward + backward of every micro-batch, sends and
receives included). No optimizer step: the gradients are left in the modules' `.grad`, equal to
the full-batch mean-loss gradient of the unsplit model.

Things to know about torch's side (read in torch 2.13's source):

- Shapes are inferred on the first `step`, collectively: the stages first vote over point-to-point
  messages, then each stage runs one real forward + backward of micro-batch 0 (on detached
  copies, so no `.grad` is touched) and ships the shapes to the next rank with
  `send_object_list`. Every rank must therefore call `step` the same number of times, and the
  first call is slower: keep it out of the timing (warm-up).
- Loss: torch calls `loss_fn` once per micro-batch and backpropagates each result as it is; with
  `scale_grads=True` (its default) it then divides every `.grad` by m in an extra pass. We do what
  minipipe does instead: divide each micro-batch's loss by m (same gradient, no extra pass over
  the parameters) and turn torch's scaling off.
- Stage i lives on rank i % p (torch's "loop" style), which is minipipe's round robin; for ZB-V and
  DualPipe-V on the V (torch's "v" style): rank r holds stages r and 2p − 1 − r, as minipipe's.
- ZB-V and DualPipe-V split backwards into I (`backward_one_chunk(full_backward=False)`) and W
  (`backward_weight_one_chunk`); DualPipe-V's overlapped pairs (OVERLAP_F_B) run their two ops one
  after the other unless a function is registered for them: one stream, as minipipe runs them.
- Speed, for reading the benchmark: GPipe and 1F1B post each receive only when its data is
  needed and wait for it at once, and 1F1B waits on its sends fused with the next receive. On
  gloo a send moves no data until the peer has posted the matching receive, so every hand-over
  costs a round trip on the critical path.

`torch_runs([RunConfig(...)])` trains minipipe's runs with torch's pipelining instead of minipipe's
executor, in one group of worker processes, and brings back the losses, a measured Trace per step
(each stage's forward and backward of each micro-batch, timed around torch's own calls) and the
action lists torch ran: lesson 15 sets them beside minipipe's.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleDualPipeV,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleLoopedBFS,
    ScheduleZBVZeroBubble,
)

# minipipe's kind -> torch's class of the same schedule (tests/schedule/test_field_schedules.py: the same orders)
SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved": ScheduleInterleaved1F1B,
    "zb-v": ScheduleZBVZeroBubble,
    "dualpipe-v": ScheduleDualPipeV,
    "bfs": ScheduleLoopedBFS,
}
SINGLE = ("gpipe", "1f1b")  # one stage per rank; the others take a list of stages
V_SHAPED = ("zb-v", "dualpipe-v")  # stage r and 2p − 1 − r on rank r


class TorchPipeline:
    """This rank's part of a torch.distributed.pipelining pipeline.

    kind            "gpipe", "1f1b" (one stage per rank), "interleaved" (v >= 2 stages per rank),
                    "bfs" (v >= 1), "zb-v" or "dualpipe-v" (2 stages per rank, on the V)
    stages          {global stage index: module} for the stages this rank owns: {rank} for gpipe
                    and 1f1b, {rank, rank + p, rank + 2p, ...} for interleaved and bfs,
                    {rank, 2p − 1 − rank} for zb-v and dualpipe-v
    num_stages      p · v, the pipeline's stage count over all ranks
    n_microbatches  m; the batch passed to `step` must split into m equal chunks
    loss_fn         loss_fn(output, target) -> mean loss of that (micro-)batch
    device, group   where the stages run; the process group of the pipeline (default: world)
    """

    def __init__(
        self,
        kind: str,
        stages: Mapping[int, nn.Module],
        num_stages: int,
        n_microbatches: int,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        device: torch.device | str = "cpu",
        group: dist.ProcessGroup | None = None,
    ):
        if not dist.is_initialized():
            raise RuntimeError(
                "TorchPipeline needs an initialised process group (dist.init_process_group) in this worker process"
            )
        p, rank = dist.get_world_size(group), dist.get_rank(group)
        _check(kind, dict(stages), num_stages, n_microbatches, p, rank)
        self.kind, self.m = kind, n_microbatches
        self.modules = [stages[s] for s in sorted(stages)]
        device = torch.device(device)
        self.stages = [PipelineStage(stages[s], s, num_stages, device, group=group) for s in sorted(stages)]
        self.has_last = num_stages - 1 in stages
        m = n_microbatches

        def scaled_loss(output, target):  # minipipe's convention: loss / m per micro-batch
            return loss_fn(output, target) / m

        schedule_cls = SCHEDULES[kind]
        options = {"loss_fn": scaled_loss}
        if "scale_grads" in inspect.signature(schedule_cls.__init__).parameters:
            options["scale_grads"] = False  # torch >= 2.6 would divide .grad by m again
        first = self.stages[0] if kind in SINGLE else self.stages
        self.schedule = schedule_cls(first, n_microbatches, **options)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float | None:
        """One training step's forward + backward over the whole batch (x, y), which every rank
        passes (only the first stage reads x, only the last reads y). Returns the full-batch
        mean loss on the rank that owns the last stage, None on the others."""
        if x.shape[0] % self.m or y.shape[0] != x.shape[0]:
            raise ValueError(
                f"the batch ({x.shape[0]} inputs, {y.shape[0]} targets) must split "
                f"into {self.m} equal micro-batches: use a batch size divisible by {self.m}"
            )
        for module in self.modules:
            module.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] | None = [] if self.has_last else None
        # Only the first stage's rank feeds x; the others pass nothing (torch's convention).
        args = (x,) if self.stages[0].is_first else ()
        target = y if self.has_last else None
        # return_outputs=False: don't keep and concatenate the last stage's outputs (unused here).
        self.schedule.step(*args, target=target, losses=losses, return_outputs=False)
        return float(sum(loss.item() for loss in losses)) if losses is not None else None


def _check(kind: str, stages: dict, num_stages: int, m: int, p: int, rank: int) -> None:
    """Reject a configuration that torch would fail on deep inside, or hang on, before any
    message is sent."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"n_microbatches must be a whole number >= 1, got {m!r}")
    if not isinstance(num_stages, int) or num_stages < p or num_stages % p:
        raise ValueError(f"num_stages must be a multiple of the {p} ranks, got {num_stages!r}")
    v = num_stages // p
    if kind in SINGLE and v != 1:
        raise ValueError(
            f"{kind} runs one stage per rank: num_stages must be {p}, got {num_stages} "
            f"(use kind='interleaved' for several stages per rank)"
        )
    if kind == "interleaved" and v < 2:
        raise ValueError(
            f"interleaved needs >= 2 stages per rank: num_stages must be a multiple "
            f"of {p} and at least {2 * p}, got {num_stages}"
        )
    if kind in V_SHAPED and v != 2:
        raise ValueError(
            f"{kind} places exactly two stages per rank, on a V: num_stages must be {2 * p}, got {num_stages}"
        )
    if kind == "dualpipe-v" and m < num_stages:
        raise ValueError(f"dualpipe-v needs at least as many micro-batches as stages: m={m} < {num_stages}")
    mine, rule = (
        ({rank, 2 * p - 1 - rank}, f"stages r and {2 * p - 1} − r live on rank r")
        if kind in V_SHAPED
        else (set(range(rank, num_stages, p)), f"stage s lives on rank s % {p}")
    )
    if set(stages) != mine:
        raise ValueError(
            f"rank {rank} of {p} owns stages {sorted(mine)} ({rule}); got modules for stages {sorted(stages)}"
        )
    if kind == "1f1b" and m < p:
        raise ValueError(f"1f1b needs at least as many micro-batches as ranks: m={m} < p={p}")
    if kind == "interleaved" and m % p:
        raise ValueError(
            f"interleaved needs the micro-batches to be a multiple of the ranks: "
            f"m={m}, p={p}; use m={p * max(1, round(m / p))}"
        )


# -- minipipe's runs, trained by torch's pipelining -------------------------------------------
@dataclass
class TorchRankResult:
    """What one rank of `train_torch_rank` brings back."""

    rank: int
    losses: list[float]  # per step, on the last stage's rank; [] elsewhere
    events: list[list[tuple[str, float, float]]]  # per step: (action, start, end), perf_counter seconds
    order: dict[int, list[str]] = field(default_factory=dict)  # torch's compute actions per rank (rank 0)


@dataclass
class TorchRun:
    plan: object  # minipipe's Plan: the schedule, the cut, the model
    losses: list[float]  # one per step: the full-batch mean loss
    traces: list  # a measured Trace per step: forwards and backwards, no waits
    order: dict[int, list[str]]  # the actions torch ran on each rank, in its text form (1F0, 1B0, ...)


def train_torch_rank(plan, rank: int, report, status=None) -> TorchRankResult:
    """A worker body (minipipe.engine.workers.launch): minipipe's plan trained by TorchPipeline on this rank —
    the same stages, weights, batches and optimizer as minipipe.engine.train, torch's schedule instead of
    minipipe's executor. Times each forward and backward of each stage around torch's calls."""
    from ..engine.partition import stage_module
    from ..frameworks.timeline import time_calls
    from ..models.catalog import task_of

    c, s = plan.config, plan.schedule
    torch.set_num_threads(c.threads)
    device = torch.device("cuda", torch.cuda.current_device()) if plan.device == "cuda" else torch.device("cpu")
    task = task_of(c)
    layers = task.layers()
    mine = {k: stage_module(layers, plan.partition, k).to(device) for k in s.stages_of(rank)}
    pipe = TorchPipeline(s.kind, mine, s.n_stages, s.m, task.loss, device)
    params = [q for module in mine.values() for q in module.parameters()]
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(params, lr=c.lr)

    def clock() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # a kernel's end, not its launch
        return time.perf_counter()

    record: list[tuple[str, float, float]] = []
    for stage in pipe.stages:
        time_calls(stage, record, clock)
    losses, steps = [], []
    for step in range(c.steps):
        if status is not None:
            status(step, -1, "compute")
        record.clear()
        x, y = (t.to(device) for t in task.batch(step))
        dist.barrier()  # every step starts together, as minipipe's do
        loss = pipe.step(x, y)
        optimizer.step()
        if loss is not None:
            losses.append(loss)
            report("step", {"step": step, "loss": loss})
        steps.append(list(record))
    order = {}
    if rank == 0 and getattr(pipe.schedule, "pipeline_order", None):
        order = {
            r: [str(a) for a in acts if a is not None and a.is_compute_op]
            for r, acts in sorted(pipe.schedule.pipeline_order.items())
        }
    return TorchRankResult(rank, losses, steps, order)


def torch_runs(configs: list, progress=None) -> list[TorchRun]:
    """Train each RunConfig (plain pipelines: dp = tp = 1, a kind torch has: SCHEDULES) with
    torch.distributed.pipelining on minipipe's stages, all in one group of processes."""
    from ..engine import workers
    from ..engine.config import prepare
    from ..engine.launch import job_of
    from ..frameworks.timeline import traces_from_events

    plans = [prepare(c) for c in configs]
    for pl in plans:
        if pl.schedule.kind not in SCHEDULES or pl.mesh.world != pl.mesh.pp:
            raise ValueError(
                f"torch_runs runs plain pipelines of kind {', '.join(SCHEDULES)} (dp=cp=tp=1); got "
                f"{pl.schedule.kind} on the {pl.mesh.describe()}"
            )
    if len({pl.world for pl in plans}) > 1:
        raise ValueError("torch_runs needs the same number of processes for every config; split them into calls")
    results = workers.launch([job_of(pl) for pl in plans], plans[0].world, train_torch_rank, progress)
    out = []
    for j, pl in enumerate(plans):
        ranks = [results[(j, r)] for r in range(pl.world)]
        traces = traces_from_events(pl.schedule, [res.events for res in ranks], "torch.distributed.pipelining")
        losses = next(res.losses for res in ranks if res.losses)
        out.append(TorchRun(pl, losses, traces, ranks[0].order))
    return out
