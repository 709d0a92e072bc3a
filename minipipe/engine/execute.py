"""The executor: run this rank's list of actions, for real.

This is the whole interpreter. For each action in the schedule's list for this rank:

    F  take the input (the batch on the first stage, else the previous stage's activation:
       local if that stage lives here, else received), run the stage, hand the output on
    B  take the output gradient (the loss on the last stage, else the next stage's input
       gradient), run backward, hand the input gradient back
    I  as B, but compute only the input gradient; the weights' wait for ...
    W  ... the weight-gradient half of the split backward

There is no second, hand-written loop per schedule: GPipe, 1F1B and interleaved differ only
in the lists they hand to this function. What an action takes and where its result goes are
read off the schedule (`Schedule.data_needs`), never written here.

A schedule may also write its communication (schedule/ops.py: torch's SEND_F, RECV_F, SEND_B, RECV_B): a
result then leaves at its SEND and its receive is posted at its RECV (comm.py), rather than as
soon as possible. FSDP's UNSHARD, RESHARD and REDUCE_GRAD are recorded and do nothing here:
minipipe's stages hold their parameters whole (a data-parallel run's gradients are averaged by
parallel/data.py as without them).

Serving runs here too: a forward-only schedule runs each F as `Stage.infer` (nothing kept for a
backward). What it needs beyond training comes in through three general doors of `step`:
`inputs` may be a function that makes micro-batch mb's input when stage 0 runs it (a stream waits
there for its requests to arrive; generation appends the token the schedule fed back, see
schedule/rounds.py), `outputs` receives the last stage's output of every forward (and returns what
the schedule hands on, if anything: generation's next tokens), and `shapes` may be a function of
the producing action where message shapes change with the micro-batch (the context grows a token
per round).

A `stage_step` hook (RunConfig(stage_step=...), exercise 08) replaces F and B: the executor hands
it the stage and a `Baton` (stage_step.py), and the hook receives, computes and sends itself. Without
one, the default path above runs unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..schedule.ir import Schedule
from ..schedule.ops import COMPUTE, SEND_B, SEND_F, SENDS_AND_RECEIVES, Action, producer_of
from ..trace import CollectiveEvent, Event, Trace, Wait
from .comm import Mailbox, message_plan
from .stage import Stage
from .stage_step import Baton


@dataclass
class StepRecord:
    """What one rank saw in one step; times are seconds on the aligned clock."""

    events: list[tuple[Action, float, float]] = field(default_factory=list)
    waits: list[tuple[str, Action | None, int | None, float, float]] = field(default_factory=list)
    bytes_sent: int = 0
    sent: dict = field(default_factory=dict)  # bytes sent by kind (accounting.KINDS)
    collectives: list = field(default_factory=list)  # (kind, bytes sent, start, end)
    loss: float | None = None
    losses: list[float] | None = None  # per training step, for a schedule of several (Schedule.updates)
    posting: float = 0.0  # seconds spent inside the backend's isend/irecv calls (gloo writes to its socket there)


def measured_trace(
    schedule: Schedule,
    records: list[StepRecord],
    meta: dict | None = None,
    *,
    step: int | None = None,
    t0: float | None = None,
) -> Trace:
    """One step's Trace from every rank's StepRecord (listed by rank): milliseconds from `t0` (a
    time on the aligned clock: a stream's start), by default from the first thing any rank did."""
    if t0 is None:
        t0 = min(
            [t for rec in records for _, t, _ in rec.events]
            + [w[3] for rec in records for w in rec.waits]
            + [c[2] for rec in records for c in rec.collectives],
            default=0.0,
        )
    ms = lambda t: (t - t0) * 1000.0  # noqa: E731
    events = [Event(r, a, ms(s), ms(e)) for r, rec in enumerate(records) for a, s, e in rec.events]
    waits = [
        Wait(r, kind, action, ms(s), ms(e), peer)
        for r, rec in enumerate(records)
        for kind, action, peer, s, e in rec.waits
    ]
    talks = [
        CollectiveEvent(r, kind, ms(s), ms(e), nbytes)
        for r, rec in enumerate(records)
        for kind, nbytes, s, e in rec.collectives
    ]
    return Trace(
        schedule,
        events,
        source="measured",
        unit="ms",
        waits=waits,
        collectives=talks,
        bytes_sent=[rec.bytes_sent for rec in records],
        traffic=[dict(rec.sent) for rec in records],
        step=step,
        meta=meta or {},
    )


class Executor:
    def __init__(
        self,
        rank: int,
        schedule: Schedule,
        stages: dict[int, Stage],
        shapes: list | Callable,
        device: torch.device,
        in_order: bool,
        timeout: float,
        clock: Callable[[], float],
        status=None,
        before_action: Callable | None = None,
        trace: bool = True,
        to_global=None,
        stage_step: Callable | None = None,
    ):
        self.rank = rank
        self.schedule = schedule
        self.stages = stages
        self.in_order = in_order  # see comm: NCCL matches messages in issue order, gloo by tag
        self.messages = message_plan(schedule, self.in_order)[rank]
        self.shapes = shapes
        self.device = device
        self.timeout = timeout
        self.clock = clock
        self.status = status or (lambda *a: None)
        self.before_action = before_action or (lambda step, action: None)
        self.trace = trace
        self.to_global = to_global  # pipeline rank -> global rank (a slice of a mesh), default the same
        self.stage_step = stage_step  # replaces F and B when given (Baton)
        # who takes each result this rank hands on: the rank of every computation that needs it (an
        # action's own earlier work, e.g. B's own F, stays inside the stage)
        self.taker = {
            d: schedule.placement[a.stage]
            for acts, row in zip(schedule.actions, schedule.data_needs_by_rank)
            for a, needs in zip(acts, row)
            if a.op in COMPUTE
            for d in needs
            if (d.stage, d.mb) != (a.stage, a.mb)
        }
        self.peak_held = 0  # most micro-batches the rank held for backwards at once, over all its stages

    def step(self, step: int, inputs, targets: list | None, outputs: Callable | None = None) -> StepRecord:
        """Run this rank's actions for one step. `inputs`/`targets` are the micro-batches (needed
        only where the first / last stage lives); `inputs` may be a function `inputs(mb, *fed)`
        of what the schedule feeds back to stage 0 (nothing, but in generation's rounds).
        `outputs(action, output)`, in a forward-only run, gets the last stage's outputs and
        returns what to hand on where the schedule says (None: nothing)."""
        s, rank = self.schedule, self.rank
        infer = s.forward_only
        mail = Mailbox(
            rank, s, self.messages, self.shapes, self.device, self.timeout, self.clock, self.in_order, self.to_global
        )
        timer = (
            NullTimer()
            if not self.trace
            else CudaTimer(self.clock)
            if self.device.type == "cuda"
            else HostTimer(self.clock)
        )
        local: dict[Action, torch.Tensor] = {}
        outbox: dict[Action, torch.Tensor] = {}  # results waiting for the schedule's own SEND
        explicit = s.explicit_comms
        marks = []

        def take(producer: Action, action: Action) -> torch.Tensor:
            if producer in local:
                return local.pop(producer)
            self.status(step, index, "wait")
            data = mail.recv(producer, needed_by=action)
            self.status(step, index, "compute")
            return data

        def first_input(a: Action, fed: list) -> torch.Tensor:
            if not callable(inputs):
                return inputs[a.mb]
            self.status(step, index, "wait")  # a lazy input may wait: for requests, for a token
            x = inputs(a.mb, *fed)
            self.status(step, index, "compute")
            return x

        def hand_on(producer: Action, tensor: torch.Tensor) -> None:
            peer = self.taker.get(producer)
            if peer is None:  # nobody needs it (the last round's tokens)
                return
            if peer == rank:
                local[producer] = tensor
            elif explicit:
                outbox[producer] = tensor
            else:
                mail.send(producer, tensor, peer)

        needs = s.data_needs_by_rank[rank]
        for index, a in enumerate(s.actions[rank]):
            self.status(step, index, "compute")
            self.before_action(step, a)
            stage = self.stages[a.stage]
            if a.op not in COMPUTE:  # a written send or receive; FSDP's actions do nothing here
                start = timer.mark()
                if a.op in SENDS_AND_RECEIVES:
                    producer = producer_of(a, s.gradient_op)
                    if a.op == SEND_F or a.op == SEND_B:
                        mail.send(producer, outbox.pop(producer), self.taker[producer])
                    else:
                        mail.post(producer)
                if self.trace:
                    marks.append((a, start, timer.mark()))
                continue
            if self.stage_step is not None and a.op in ("F", "B"):
                baton = Baton(a, stage, inputs, targets, take, hand_on, s.gradient_op, self.shapes)
                start = timer.mark()
                self.stage_step(stage, baton)
                baton.finish()
                out = None
            elif a.op == "F":
                fed = [take(d, a) for d in needs[index]]  # the previous stage's output; on stage 0 what is fed back
                x = first_input(a, fed) if stage.is_first else fed[0]
                start = timer.mark()
                out = stage.infer(x) if infer else stage.forward(a.mb, x, targets[a.mb] if stage.is_last else None)
            elif a.op in ("B", "I"):
                grad = None if stage.is_last else take(Action(s.gradient_op(a.stage + 1, a.mb), a.stage + 1, a.mb), a)
                start = timer.mark()
                out = (stage.backward if a.op == "B" else stage.backward_input)(a.mb, grad)
            else:
                start = timer.mark()
                out = stage.backward_weight(a.mb)
            if self.trace:  # the span is the compute alone; posting the send comes after it
                marks.append((a, start, timer.mark()))
            if infer and stage.is_last:
                out = outputs(a, out) if outputs is not None else None
            self._count_held()
            if out is not None:
                hand_on(a, out)

        self.status(step, len(s.actions[rank]), "wait")
        mail.finish()
        record = StepRecord(
            events=[(a, timer.read(t0), timer.read(t1)) for a, t0, t1 in marks],
            waits=mail.waits,
            bytes_sent=mail.bytes_sent,
            sent=dict(mail.sent_by_kind),
            posting=mail.posting,
        )
        last = [st for st in self.stages.values() if st.is_last]
        if last and s.updates is not None:
            record.losses = last[0].step_losses(s.updates.per_step, s.updates.per_update)
        elif last:
            record.loss = last[0].step_loss()
        for st in self.stages.values():
            st.reset_step()
        return record

    def _count_held(self) -> None:
        """The rank's peak of micro-batches kept for backward, counted over all its stages at once:
        an interleaved rank's v chunks hold micro-batches at the same time, so its peak is more
        than any one stage's (their bytes are counted in the one HeldBytes the stages share)."""
        self.peak_held = max(self.peak_held, sum(len(st.saved) for st in self.stages.values()))


class NullTimer:
    """Tracing off: no clock reads at all (to measure what tracing costs)."""

    def mark(self):
        return 0.0


class HostTimer:
    """CPU work is synchronous: the clock after a call is when it finished."""

    def __init__(self, clock):
        self.clock = clock

    def mark(self):
        return self.clock()

    def read(self, mark) -> float:
        return mark


class CudaTimer:
    """GPU work is asynchronous: record CUDA events in the stream and read them after a sync,
    relative to a reference event taken together with the host clock."""

    def __init__(self, clock):
        torch.cuda.synchronize()
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        self.ref_host = clock()
        self._synced = False

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def read(self, event) -> float:
        if not self._synced:
            torch.cuda.synchronize()
            self._synced = True
        return self.ref_host + self.ref.elapsed_time(event) / 1000.0
