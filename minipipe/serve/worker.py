"""What every rank does to serve: build its stages for inference, warm them up, then run its
forward-only actions as the requests (or the generation rounds) come.

`serve_rank(plan, rank, report, status)` is the body workers.launch runs on each rank, as
train.train_rank is for training; serve.py prepares the plan and puts the ranks' results
together. The activations between stages travel as in training (comm.Mailbox: every message
derived from the schedule, receives posted early, every wait with a timeout).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..engine.comm import Mailbox, clock_offset, message_plan, wire_device
from ..engine.stage import Stage
from ..engine.train import AlignedClock, stage_module
from ..models.catalog import make_task
from ..parallel.errors import CommError
from ..parallel.mesh import make_groups
from ..parallel.tensor import tensor_parallel
from ..schedule.ir import Schedule
from ..schedule.ops import Action, receiver_stage


@dataclass
class RankServed:
    """One rank's share of a serving run; times are seconds on rank 0's clock."""

    rank: int
    coords: tuple[int, int, int]
    t0: float                           # the stream's start
    events: list                        # (action, start, end)
    waits: list                         # as StepRecord.waits: (kind, producer, peer, start, end)
    bytes_sent: int
    outputs: dict | None = None         # last stage: micro-batch -> output (a stream)
    tokens: dict | None = None          # last stage: (round, micro-batch) -> (tokens, time) (generation)


def serve_rank(plan, rank: int, report, status) -> RankServed:
    c, mesh, schedule = plan.config, plan.mesh, plan.schedule
    torch.set_num_threads(c.threads)
    device = torch.device("cuda", torch.cuda.current_device()) if plan.device == "cuda" else torch.device("cpu")
    where = mesh.coords(rank)
    groups = make_groups(mesh, timeout=c.timeout) if mesh.tp > 1 else None
    # tokens go back to stage 0 apart from the activations: over NCCL they would queue behind them
    tokens_group = dist.new_group(backend="gloo") if plan.prompts is not None and plan.backend != "gloo" else None
    stages = build_stages(plan, where.pp, device, groups)
    warm_up(plan, stages, device)
    status(0, -1, "barrier")
    clock = AlignedClock()
    clock.offset = clock_offset(rank, mesh.world, device if plan.backend == "nccl" else None)
    runner = Runner(rank, mesh.pipeline(rank), schedule, stages, device, clock, status, c.timeout)
    dist.barrier()
    t0 = clock()
    if plan.stream is not None:
        result = serve_stream(plan, runner, t0, report if where.tp == 0 else None)
    else:
        result = generate_tokens(plan, runner, t0, report if where.tp == 0 else None, tokens_group)
    status(0, len(schedule.actions[where.pp]), "done")
    dist.barrier()
    return RankServed(rank, tuple(where), t0, runner.events, runner.waits, runner.bytes_sent, **result)


def build_stages(plan, q: int, device, groups=None) -> dict[int, Stage]:
    """Pipeline rank q's stages, in eval mode, with the served weights (its tp slice of them)."""
    c, schedule = plan.config, plan.schedule
    layers = make_task(c.model, batch_size=plan.microbatch, seed=c.seed, **c.model_args).layers()
    if c.state is not None:
        torch.nn.Sequential(*layers).load_state_dict(c.state)
    if groups is not None and groups.tp.size > 1:
        layers = [tensor_parallel(layer, groups.tp.index, groups.tp.size, groups.tp.group) for layer in layers]
    return {s: Stage(s, stage_module(layers, plan.partition, s).to(device).eval(), schedule.n_stages, schedule.m)
            for s in schedule.stages_of(q)}


def warm_up(plan, stages: dict[int, Stage], device) -> None:
    """One forward per stage before the clock starts, as a server warms up: the first call of a
    process pays for allocations and lazy set-up that no request should be charged."""
    if plan.stream is not None:
        first, shapes = plan.inputs[:plan.microbatch], plan.shapes
    else:
        first = plan.prompts[:plan.microbatch]
        shapes = plan.shapes_by_length[first.shape[1]]
    for s, stage in sorted(stages.items()):
        x = first if s == 0 else torch.zeros(*shapes[s - 1][0], dtype=shapes[s - 1][1])
        stage.infer(x.to(device))


class Runner:
    """This rank's actions and what it records: the events, the waits, the bytes it sent."""

    def __init__(self, rank, to_global, schedule: Schedule, stages, device, clock, status, timeout):
        self.rank, self.to_global, self.schedule, self.stages = rank, list(to_global), schedule, stages
        self.q = self.to_global.index(rank)
        self.device, self.clock, self.status, self.timeout = device, clock, status, timeout
        self.events, self.waits, self.bytes_sent = [], [], 0
        self.local: dict[Action, torch.Tensor] = {}

    def mailbox(self, schedule: Schedule, shapes: list, in_order: bool) -> Mailbox:
        return Mailbox(self.q, schedule, message_plan(schedule, in_order)[self.q], shapes, self.device, self.timeout,
                       self.clock, in_order, self.to_global)

    def take(self, mail: Mailbox, a: Action, index: int) -> torch.Tensor:
        """The input of forward `a` (not on stage 0): from this rank, or received."""
        producer = Action("F", a.stage - 1, a.mb)
        if producer in self.local:
            return self.local.pop(producer)
        self.status(0, index, "wait")
        return mail.recv(producer, needed_by=a)

    def forward(self, a: Action, x: torch.Tensor, index: int) -> torch.Tensor:
        self.status(0, index, "compute")
        start = self.clock()
        out = self.stages[a.stage].infer(x)
        if self.device.type == "cuda":
            torch.cuda.synchronize()   # a result is served when it exists, not when it is queued
        self.events.append((a, start, self.clock()))
        return out

    def hand_on(self, mail: Mailbox, a: Action, out: torch.Tensor) -> None:
        peer = self.schedule.placement[receiver_stage(a)]
        if peer == self.q:
            self.local[a] = out
        else:
            mail.send(a, out, peer)

    def close(self, mail: Mailbox) -> None:
        mail.finish()
        self.waits += mail.waits
        self.bytes_sent += mail.bytes_sent


def serve_stream(plan, runner: Runner, t0: float, report) -> dict:
    """Run this rank's forwards in the schedule's order; stage 0 waits for each micro-batch's
    requests to arrive."""
    s, k = plan.schedule, plan.microbatch
    ready = plan.stream.ready_ms()
    mail = runner.mailbox(s, plan.shapes, plan.in_order)
    outputs = {}
    for index, a in enumerate(s.actions[runner.q]):
        if a.stage == 0:
            runner.status(0, index, "wait")
            sleep_until(t0 + ready[a.mb] / 1000, runner.clock)
            x = plan.inputs[a.mb * k:(a.mb + 1) * k].to(runner.device)
        else:
            x = runner.take(mail, a, index)
        out = runner.forward(a, x, index)
        if a.stage == s.n_stages - 1:
            if plan.config.keep_outputs:
                outputs[a.mb] = out.cpu()
            if report is not None:
                report("served", {"mb": a.mb, "ms": (runner.events[-1][2] - t0) * 1000})
        else:
            runner.hand_on(mail, a, out)
    runner.close(mail)
    return {"outputs": outputs if s.placement[-1] == runner.q else None}


def generate_tokens(plan, runner: Runner, t0: float, report, tokens_group) -> dict:
    """Round r: every micro-batch once through the pipeline with its context so far (its last
    `block` tokens); the last stage picks the next tokens and sends them to stage 0."""
    s, k, per_round, rounds = plan.schedule, plan.microbatch, plan.per_round, plan.rounds
    first, last = s.placement[0], s.placement[-1]
    acts = s.actions[runner.q]
    per = len(acts) // rounds
    tag0 = 2 * s.n_stages * s.m          # above every activation's tag (comm.tag_of)
    feedback = TokenLine(runner, first, last, k, per_round, tag0, tokens_group)
    context = {j: plan.prompts[j * k:(j + 1) * k].to(runner.device) for j in range(per_round)} \
        if runner.q == first else {}
    tokens = {}
    for r in range(rounds):
        lists = [a_list[r * per:(r + 1) * per] for a_list in s.actions]
        round_schedule = Schedule.build(s.kind, s.p, s.m, s.v, lists, s.placement)
        length = min(plan.prompts.shape[1] + r, plan.block)
        mail = runner.mailbox(round_schedule, plan.shapes_by_length[length], plan.in_order)
        for i, a in enumerate(lists[runner.q]):
            index, j = r * per + i, a.mb - r * per_round
            if a.stage == 0:
                if r > 0:
                    context[j] = torch.cat([context[j], feedback.take(r - 1, j, index).to(runner.device)[:, None]], 1)
                x = context[j][:, -plan.block:]
            else:
                x = runner.take(mail, a, index)
            out = runner.forward(a, x, index)
            if a.stage == s.n_stages - 1:
                chosen = out[:, -1].argmax(dim=-1)
                done = runner.events[-1][2]
                tokens[(r, j)] = (chosen.tolist(), done)
                if report is not None:
                    report("token", {"round": r, "sequences": list(range(j * k, (j + 1) * k)),
                                     "tokens": chosen.tolist(), "ms": (done - t0) * 1000})
                if r + 1 < rounds:
                    feedback.give(r, j, chosen)
            else:
                runner.hand_on(mail, a, out)
        runner.close(mail)
    feedback.finish()
    return {"tokens": tokens if runner.q == last else None}


class TokenLine:
    """The next tokens, from the last stage's rank back to stage 0's: one small message per
    micro-batch and round, tagged above the activations' tags."""

    def __init__(self, runner: Runner, first: int, last: int, k: int, per_round: int, tag0: int, group):
        self.runner, self.first, self.last, self.k, self.tag0, self.group = runner, first, last, k, tag0, group
        self.per_round = per_round
        self.wire = torch.device("cpu") if group is not None else wire_device(runner.device, dist.get_backend())
        self.kept: dict[tuple[int, int], torch.Tensor] = {}
        self.sends = []

    def _mb(self, r: int, j: int) -> int:
        return r * self.per_round + j        # the micro-batch's number in the whole run

    def _tag(self, r: int, j: int) -> int:
        return self.tag0 + self._mb(r, j)

    def give(self, r: int, j: int, chosen: torch.Tensor) -> None:
        if self.first == self.last:
            self.kept[(r, j)] = chosen
            return
        tensor = chosen.to(self.wire)
        self.sends.append((dist.isend(tensor, dst=self.runner.to_global[self.first], tag=self._tag(r, j),
                                      group=self.group), tensor))

    def take(self, r: int, j: int, index: int) -> torch.Tensor:
        if self.first == self.last:
            return self.kept.pop((r, j))
        buf = torch.empty(self.k, dtype=torch.long, device=self.wire)
        work = dist.irecv(buf, src=self.runner.to_global[self.last], tag=self._tag(r, j), group=self.group)
        self.runner.status(0, index, "wait")
        start = self.runner.clock()
        self.wait(work, f"waiting for the tokens of round {r}, micro-batch {j}", self.last)
        self.runner.waits.append(("recv", Action("F", self.runner.schedule.n_stages - 1, self._mb(r, j)), self.last, start,
                                 self.runner.clock()))
        return buf

    def finish(self) -> None:
        for work, _ in self.sends:
            self.wait(work, "sending tokens", self.first)
        self.sends.clear()

    def wait(self, work, what: str, peer: int) -> None:
        me, other = self.runner.rank, self.runner.to_global[peer]
        try:
            work.wait(timeout=timedelta(seconds=self.runner.timeout))
        except RuntimeError as e:
            text = str(e)
            if "imed out" in text or "Timeout" in text:
                raise CommError(f"rank {me} timed out after {self.runner.timeout:g} s {what} from rank {other}; "
                                f"rank {other} may be stuck or slow", other, "timeout") from None
            raise CommError(f"rank {me} lost rank {other} while {what}: {text.splitlines()[0]}", other,
                            "lost") from None


def sleep_until(t: float, clock) -> None:
    while (left := t - clock()) > 0:
        time.sleep(left)
