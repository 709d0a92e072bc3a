"""What every rank does to serve: engine/train.py's RankStep (its stages, built for inference with the
served weights; its groups, clock and executor), warmed up, then one pass of the executor over
the plan's forward-only schedule.

`serve_rank(plan, rank, report, status)` is the body workers.launch runs on each rank, as
engine/rank_job.py's train_rank is for training. Serving's own part is two small feeds of the executor's
general doors: stage 0's input, made when the action runs (a stream's requests, once they have
arrived; generation's context, with the token fed back), and the last stage's outputs (kept,
or turned into the next tokens, which the schedule hands back to stage 0 as a message like any
other: schedule/rounds.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..engine.execute import StepRecord
from ..engine.faults import fault_hook
from ..engine.train import RankStep
from ..schedule.ops import Action
from .work import GenerationWork, StreamWork


@dataclass
class RankServed:
    """One rank's share of a serving run; times are seconds on rank 0's clock."""

    rank: int
    coords: tuple[int, ...]  # (pp, dp, cp, ep, tp) on the mesh
    t0: float  # the stream's start
    record: StepRecord  # what the executor saw: events, waits, bytes, collectives
    in_order: bool  # the executor matched messages in issue order (else by tag)
    kept: dict | None = None  # last stage: micro-batch -> its outputs (a stream) or next tokens


def serve_rank(plan, rank: int, report, status) -> RankServed:
    torch.set_num_threads(plan.config.threads)
    me = RankStep(plan, rank, status, fault_hook(plan.config.fault, rank))
    warm_up(plan, me)
    me.start()
    dist.barrier()
    t0 = me.clock()
    feed = (StreamFeed if isinstance(plan.work, StreamWork) else TokenFeed)(
        plan.work, me.device, me.clock, t0, report if me.where.tp == 0 else None
    )
    record = me.executor.step(0, feed.inputs, None, outputs=feed.outputs)
    me.talk.add_to(record, None)
    status(0, len(plan.schedule.actions[me.where.pp]), "done")
    dist.barrier()
    last = me.needs_targets  # this rank holds the last stage
    return RankServed(rank, tuple(me.where), t0, record, me.executor.in_order, feed.kept if last else None)


def warm_up(plan, me: RankStep) -> None:
    """One forward per stage before the clock starts, as a server warms up: the first call of a
    process pays for allocations and lazy set-up that no request should be charged."""
    for s, stage in sorted(me.stages.items()):
        shape, dtype = plan.layer_shapes[plan.partition.bounds[s]]  # the stage's input
        stage.infer(torch.zeros(shape, dtype=dtype, device=me.device))
    me.talk.reset()  # the warm-up's tensor-parallel all-reduces are not the run's


class StreamFeed:
    """A request stream: stage 0 takes a micro-batch once its requests have arrived; the last
    stage keeps its outputs (if asked) and tells the caller it was served."""

    def __init__(self, work: StreamWork, device, clock, t0: float, report):
        self.work, self.device, self.clock, self.t0, self.report = work, device, clock, t0, report
        self.ready = work.stream.ready_ms()
        self.kept: dict[int, torch.Tensor] = {}

    def inputs(self, mb: int) -> torch.Tensor:
        while (left := self.t0 + self.ready[mb] / 1000 - self.clock()) > 0:
            time.sleep(left)
        k = self.work.stream.microbatch
        return self.work.inputs[mb * k : (mb + 1) * k].to(self.device)

    def outputs(self, a: Action, out: torch.Tensor) -> None:
        if self.work.keep_outputs:
            self.kept[a.mb] = out.cpu()
        if self.report is not None:
            if self.device.type == "cuda":
                torch.cuda.synchronize()  # a result is served when it exists, not when it is queued
            self.report("served", {"mb": a.mb, "ms": (self.clock() - self.t0) * 1000})
        return None


class TokenFeed:
    """Greedy generation: stage 0 appends the token fed back from the last stage to its
    micro-batch's context and runs the last `block` tokens; the last stage picks each
    sequence's next token and hands it back (not after the last round: the schedule says so)."""

    def __init__(self, work: GenerationWork, device, clock, t0: float, report):
        self.work, self.device, self.clock, self.t0, self.report = work, device, clock, t0, report
        k = work.microbatch
        self.context = {j: work.prompts[j * k : (j + 1) * k].to(device) for j in range(work.per_round)}
        self.kept: dict[int, list[int]] = {}

    def inputs(self, mb: int, *fed: torch.Tensor) -> torch.Tensor:
        j = mb % self.work.per_round
        if fed:  # round 1 on: the tokens of this micro-batch's last round
            self.context[j] = torch.cat([self.context[j], fed[0].to(self.device)[:, None]], 1)
        return self.context[j][:, -self.work.block :]

    def outputs(self, a: Action, out: torch.Tensor) -> torch.Tensor:
        chosen = out[:, -1].argmax(dim=-1)
        self.kept[a.mb] = chosen.tolist()
        if self.report is not None:
            r, j = divmod(a.mb, self.work.per_round)
            k = self.work.microbatch
            self.report(
                "token",
                {
                    "round": r,
                    "sequences": list(range(j * k, (j + 1) * k)),
                    "tokens": self.kept[a.mb],
                    "ms": (self.clock() - self.t0) * 1000,
                },
            )
        return chosen
