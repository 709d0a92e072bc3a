"""The executor: run this rank's list of actions, for real.

This is the whole interpreter. For each action in the schedule's list for this rank:

    F  take the input (the batch on the first stage, else the previous stage's activation:
       local if that stage lives here, else received), run the stage, hand the output on
    B  take the output gradient (the loss on the last stage, else the next stage's input
       gradient), run backward, hand the input gradient back
    I  as B, but compute only the input gradient; the weights' wait for ...
    W  ... the weight-gradient half of the split backward

There is no second, hand-written loop per schedule: GPipe, 1F1B and interleaved differ only
in the lists they hand to this function.

A `stage_step` hook (RunConfig(stage_step=...), exercise 08) replaces F and B: the executor hands
it the stage and a `Baton` (baton.py), and the hook receives, computes and sends itself. Without
one, the default path above runs unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..schedule.ir import Schedule
from ..schedule.ops import Action, receiver_stage
from ..trace import CollectiveEvent, Event, Trace, Wait
from .baton import Baton
from .comm import Mailbox, message_plan
from .stage import Stage


@dataclass
class StepRecord:
    """What one rank saw in one step; times are seconds on the aligned clock."""

    events: list[tuple[Action, float, float]] = field(default_factory=list)
    waits: list[tuple[str, Action | None, int | None, float, float]] = field(default_factory=list)
    bytes_sent: int = 0
    sent: dict = field(default_factory=dict)          # bytes sent by kind (accounting.KINDS)
    collectives: list = field(default_factory=list)   # (kind, bytes sent, start, end)
    loss: float | None = None


def measured_trace(schedule: Schedule, records: list[StepRecord], meta: dict | None = None, *,
                   step: int | None = None) -> Trace:
    """One step's Trace from every rank's StepRecord (listed by rank): milliseconds from the
    first thing any rank did in the step."""
    t0 = min([t for rec in records for _, t, _ in rec.events] + [w[3] for rec in records for w in rec.waits]
             + [c[2] for rec in records for c in rec.collectives], default=0.0)
    ms = lambda t: (t - t0) * 1000.0   # noqa: E731
    events = [Event(r, a, ms(s), ms(e)) for r, rec in enumerate(records) for a, s, e in rec.events]
    waits = [Wait(r, kind, action, ms(s), ms(e), peer)
             for r, rec in enumerate(records) for kind, action, peer, s, e in rec.waits]
    talks = [CollectiveEvent(r, kind, ms(s), ms(e), nbytes)
             for r, rec in enumerate(records) for kind, nbytes, s, e in rec.collectives]
    return Trace(schedule, events, source="measured", unit="ms", waits=waits, collectives=talks,
                 bytes_sent=[rec.bytes_sent for rec in records], traffic=[dict(rec.sent) for rec in records],
                 step=step, meta=meta or {})


class Executor:
    def __init__(self, rank: int, schedule: Schedule, stages: dict[int, Stage], shapes: list, device: torch.device,
                 in_order: bool, timeout: float, clock: Callable[[], float],
                 status=None, before_action: Callable | None = None, trace: bool = True, to_global=None,
                 stage_step: Callable | None = None):
        self.rank = rank
        self.schedule = schedule
        self.stages = stages
        self.in_order = in_order     # see comm: NCCL matches messages in issue order, gloo by tag
        self.messages = message_plan(schedule, self.in_order)[rank]
        self.shapes = shapes
        self.device = device
        self.timeout = timeout
        self.clock = clock
        self.status = status or (lambda *a: None)
        self.before_action = before_action or (lambda step, action: None)
        self.trace = trace
        self.to_global = to_global   # pipeline rank -> global rank (a slice of a mesh), default the same
        self.stage_step = stage_step   # replaces F and B when given (Baton)
        self.peak_held = self.peak_bytes = 0   # what the rank held for backwards at once, over all its stages

    def step(self, step: int, inputs: list | None, targets: list | None) -> StepRecord:
        """Run this rank's actions for one step. `inputs`/`targets` are the micro-batches (needed
        only where the first / last stage lives)."""
        s, rank = self.schedule, self.rank
        mail = Mailbox(rank, s, self.messages, self.shapes, self.device, self.timeout, self.clock, self.in_order,
                       self.to_global)
        timer = (NullTimer() if not self.trace else
                 CudaTimer(self.clock) if self.device.type == "cuda" else HostTimer(self.clock))
        local: dict[Action, torch.Tensor] = {}
        marks = []

        def take(producer: Action, action: Action) -> torch.Tensor:
            if producer in local:
                return local.pop(producer)
            self.status(step, index, "wait")
            data = mail.recv(producer, needed_by=action)
            self.status(step, index, "compute")
            return data

        def hand_on(producer: Action, tensor: torch.Tensor) -> None:
            peer = s.placement[receiver_stage(producer)]
            if peer == rank:
                local[producer] = tensor
            else:
                mail.send(producer, tensor, peer)

        for index, a in enumerate(s.actions[rank]):
            self.status(step, index, "compute")
            self.before_action(step, a)
            stage = self.stages[a.stage]
            if self.stage_step is not None and a.op in ("F", "B"):
                baton = Baton(a, stage, inputs, targets, take, hand_on, s.gradient_op, self.shapes)
                start = timer.mark()
                self.stage_step(stage, baton)
                baton.finish()
                out = None
            elif a.op == "F":
                x = inputs[a.mb] if stage.is_first else take(Action("F", a.stage - 1, a.mb), a)
                start = timer.mark()
                out = stage.forward(a.mb, x, targets[a.mb] if stage.is_last else None)
            elif a.op in ("B", "I"):
                grad = None if stage.is_last else take(Action(s.gradient_op(a.stage + 1, a.mb), a.stage + 1, a.mb), a)
                start = timer.mark()
                out = (stage.backward if a.op == "B" else stage.backward_input)(a.mb, grad)
            else:
                start = timer.mark()
                out = stage.backward_weight(a.mb)
            if self.trace:   # the span is the compute alone; posting the send comes after it
                marks.append((a, start, timer.mark()))
            self._count_held()
            if out is not None:
                hand_on(a, out)

        self.status(step, len(s.actions[rank]), "wait")
        mail.finish()
        record = StepRecord(events=[(a, timer.read(t0), timer.read(t1)) for a, t0, t1 in marks],
                            waits=mail.waits, bytes_sent=mail.bytes_sent, sent=dict(mail.sent_by_kind))
        last = [st for st in self.stages.values() if st.is_last]
        if last:
            record.loss = last[0].step_loss()
        for st in self.stages.values():
            st.reset_step()
        return record


    def _count_held(self) -> None:
        """The rank's peak of activations kept for backward, counted over all its stages at once:
        an interleaved rank's v chunks hold micro-batches at the same time, so its peak is more
        than any one stage's."""
        held = [(len(st.saved), st.bytes_per_microbatch or 0) for st in self.stages.values()]
        self.peak_held = max(self.peak_held, sum(n for n, _ in held))
        self.peak_bytes = max(self.peak_bytes, sum(n * nbytes for n, nbytes in held))


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
