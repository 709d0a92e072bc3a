"""What happened, per rank: the one record that both the simulator and the executor produce.

A `Trace` holds every executed action with its start and end time (milliseconds from the
start of the step), and, for measured runs, the time each rank spent blocked on communication.
Everything shown to a learner — bubble, idle time, activation memory, plots, Chrome traces —
is computed from a Trace, so a prediction and a measurement are shown by the same code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from .schedule.ir import Schedule
from .schedule.ops import ALL_OPS, Action
from .schedule.updates import held
from .traffic import TrafficKind


class Event(NamedTuple):
    rank: int
    action: Action
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


class Wait(NamedTuple):
    """A rank blocked on communication (measured runs). kind "recv": waiting for the output of
    `action` (e.g. 1F3) from rank `peer`; kind "send": waiting for the step's sends to complete."""

    rank: int
    kind: str
    action: Action | None
    start: float
    end: float
    peer: int | None = None

    @property
    def what(self) -> str:
        """For people: 'recv 1F3 from rank 1', 'send completion'."""
        if self.kind == "send":
            return "send completion"
        return f"{self.kind} {self.action}" + (f" from rank {self.peer}" if self.peer is not None else "")


class CollectiveEvent(NamedTuple):
    """A collective a rank took part in (measured, or simulated on a mesh): its kind
    (TrafficKind.TP_ALL_REDUCE, DP_ALL_REDUCE, ...), from its start until it was found complete,
    and the bytes this rank sent for it."""

    rank: int
    kind: TrafficKind
    start: float
    end: float
    nbytes: float


def held_curve(deltas: list[tuple[float, float]], start: float) -> list[tuple[float, float]]:
    """(time, amount held) steps from (time, change) pairs, starting at 0 at `start`; at a tie
    a release comes before an allocation, so a peak is never a moment's double count."""
    curve: list[tuple[float, float]] = [(start, 0)]
    held: float = 0  # stays an int while the changes are ints (counts)
    for t, d in sorted(deltas):  # by time, then change: a release (< 0) first
        held += d
        curve.append((t, held))
    return curve


@dataclass
class Trace:
    schedule: Schedule
    events: list[Event]
    source: str = "simulated"  # "simulated" or "measured"
    unit: str = "ms"
    waits: list[Wait] = field(default_factory=list)
    bytes_sent: list[int] = field(default_factory=list)  # per rank: point-to-point bytes sent
    collectives: list[CollectiveEvent] = field(default_factory=list)
    traffic: list[dict[TrafficKind, float]] = field(default_factory=list)  # per rank: bytes sent by TrafficKind
    costs: object = None  # the simulator's Costs (simulated traces)
    step: int | None = None  # which training step (measured traces)
    meta: dict[str, Any] = field(default_factory=dict)  # what its maker adds: where a measured run ran (device, where)

    @property
    def p(self) -> int:
        return self.schedule.p

    @cached_property
    def _by_rank(self) -> list[list[Event]]:
        rows: list[list[Event]] = [[] for _ in range(self.p)]
        for e in self.events:
            rows[e.rank].append(e)
        return [sorted(row, key=lambda e: e.start) for row in rows]

    def rank_events(self, rank: int) -> list[Event]:
        return self._by_rank[rank]

    # -- time ------------------------------------------------------------------------------
    @cached_property
    def start(self) -> float:
        return min([e.start for e in self.events] + [c.start for c in self.collectives], default=0.0)

    @cached_property
    def makespan(self) -> float:
        """Wall time of the step, over all ranks: from the first action (or collective) to the end of
        the last one — a step is done when its gradients are averaged, not when its last backward is."""
        return max([e.end for e in self.events] + [c.end for c in self.collectives], default=0.0) - self.start

    @cached_property
    def compute_span(self) -> float:
        """From the first action's start to the last action's end: the pipeline's own span, without
        the gradient all-reduces that may run on after the last backward (the planner's 'pipeline')."""
        if not self.events:
            return 0.0
        return max(e.end for e in self.events) - min(e.start for e in self.events)

    def busy(self, rank: int) -> float:
        return sum(e.duration for e in self.rank_events(rank))

    def idle(self, rank: int) -> float:
        return self.makespan - self.busy(rank)

    def gaps(self, rank: int, min_length: float = 0.0) -> list[tuple[float, float]]:
        """Idle intervals of one rank within the step, as (start, end)."""
        out, t = [], self.start
        for e in self.rank_events(rank):
            if e.start - t > min_length:
                out.append((t, e.start))
            t = max(t, e.end)
        end = self.start + self.makespan
        if end - t > min_length:
            out.append((t, end))
        return out

    def bubble(self) -> float:
        """Fraction of all ranks' time spent idle: sum of idle / (p · makespan)."""
        total = self.p * self.makespan
        return sum(self.idle(r) for r in range(self.p)) / total if total else 0.0

    def bubble_per_rank(self) -> list[float]:
        return [self.idle(r) / self.makespan if self.makespan else 0.0 for r in range(self.p)]

    def wait_time(self, rank: int) -> float:
        return sum(w.end - w.start for w in self.waits if w.rank == rank)

    # -- memory ----------------------------------------------------------------------------
    def inflight_curve(self, rank: int, per_stage: Sequence[float] | None = None) -> list[tuple[float, float]]:
        """(time, micro-batches held) steps for one rank. A micro-batch's activations on a stage
        are held from the start of its forward until its backward ends (its W, when backward
        is split into I and W: ops.ALL_OPS says which ops hold and free). With v > 1 each count is
        one chunk: 1/v of the rank's layers. With `per_stage` (what one micro-batch holds on
        each stage, e.g. bytes) the curve adds those up instead of counting. A forward-only
        (serving) schedule keeps nothing for a backward: its curve stays at 0."""
        if self.schedule.forward_only:
            return [(self.start, 0)]
        deltas: list[tuple[float, float]] = []
        for e in self.rank_events(rank):
            op, size = ALL_OPS[e.action.op], 1 if per_stage is None else per_stage[e.action.stage]
            if op.holds:
                deltas.append((e.start, size))
            elif op.frees:
                deltas.append((e.end, -size))
        return held_curve(deltas, self.start)

    def peak_inflight(self, per_stage: Sequence[float] | None = None) -> list[float]:
        """Peak micro-batches (stage chunks when v > 1) whose activations a rank holds at once;
        with `per_stage`, the peak of what they hold (inflight_curve)."""
        return [max(n for _, n in self.inflight_curve(r, per_stage)) for r in range(self.p)]

    def weight_versions_curve(self, rank: int) -> list[tuple[float, float]]:
        """(time, weight versions held) steps for one rank, all its stages together: one version
        throughout for a flushed step; under an asynchronous schedule each version from the update
        that makes it until it is superseded and its last backward has ended (schedule/updates.py)."""
        if self.schedule.updates is None:
            return [(self.start, 1)]
        ends = {e.action: e.end for e in self.events}
        spans = held(
            self.schedule, lambda r, i: ends[self.schedule.actions[r][i]], self.start, self.start + self.makespan
        )
        deltas: list[tuple[float, float]] = [
            d
            for stage in self.schedule.stages_of(rank)
            for born, until in spans[stage]
            if until > born  # a version made by the step's last update is never held
            for d in ((born, 1), (until, -1))
        ]
        return held_curve(deltas, self.start)

    def peak_weight_versions(self) -> list[int]:
        """Most versions of its weights each rank held at once (weight_versions_curve)."""
        return [int(max(n for _, n in self.weight_versions_curve(r))) for r in range(self.p)]

    # -- output ----------------------------------------------------------------------------
    def summary(self, theory: float | None = None) -> str:
        lines = [
            f"{self.source} {self.schedule.kind}  p={self.p} m={self.schedule.m} v={self.schedule.v}",
            f"makespan {self.makespan:.3f} {self.unit}   bubble {100 * self.bubble():.1f}%"
            + (f"   (theory {100 * theory:.1f}%)" if theory is not None else ""),
        ]
        peaks, idle = self.peak_inflight(), self.bubble_per_rank()
        for r in range(self.p):
            extra = f"  sent {self.bytes_sent[r]:,} B" if self.bytes_sent else ""
            if self.traffic and any(k.is_collective and v for k, v in self.traffic[r].items()):
                extra += " (" + ", ".join(f"{k} {v:,.0f}" for k, v in self.traffic[r].items() if v) + ")"
            lines.append(
                f"  rank {r}: busy {self.busy(r):9.3f}  idle {100 * idle[r]:5.1f}%  peak in-flight {peaks[r]}{extra}"
            )
        return "\n".join(lines)

    def to_chrome(self, path: str | None = None) -> dict[str, Any]:
        """Chrome trace JSON (open in https://ui.perfetto.dev or chrome://tracing): one row per rank."""
        scale = 1000.0 if self.unit == "ms" else 1.0  # Chrome wants microseconds
        events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"minipipe {self.source}"}}]
        for r in range(self.p):
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
        for e in self.events:
            events.append(
                {
                    "name": str(e.action),
                    "cat": e.action.op,
                    "ph": "X",
                    "pid": 0,
                    "tid": e.rank,
                    "ts": e.start * scale,
                    "dur": e.duration * scale,
                    "args": {"stage": e.action.stage, "microbatch": e.action.mb},
                }
            )
        for w in self.waits:
            events.append(
                {
                    "name": w.what,
                    "cat": "wait",
                    "ph": "X",
                    "pid": 0,
                    "tid": w.rank,
                    "ts": w.start * scale,
                    "dur": (w.end - w.start) * scale,
                }
            )
        for c in self.collectives:
            events.append(
                {
                    "name": str(c.kind),
                    "cat": "collective",
                    "ph": "X",
                    "pid": 0,
                    "tid": c.rank,
                    "ts": c.start * scale,
                    "dur": (c.end - c.start) * scale,
                    "args": {"bytes": c.nbytes},
                }
            )
        doc = {"traceEvents": events, "displayTimeUnit": "ms"}
        if path:
            with open(path, "w") as f:
                json.dump(doc, f)
        return doc

    def ascii(self, width: int = 100) -> str:
        """A terminal timeline: one row per rank, F as the micro-batch digit, B as letters."""
        span = self.makespan or 1.0
        rows = []
        for r in range(self.p):
            row = [" "] * width
            for e in self.rank_events(r):
                a = int((e.start - self.start) / span * width)
                b = max(a + 1, int((e.end - self.start) / span * width))
                ch = _glyph(e.action)
                for i in range(a, min(b, width)):
                    row[i] = ch
            rows.append(f"rank {r} |{''.join(row)}|")
        legend = "F: 0-9 (micro-batch mod 10)   B: a-j   I: k-t   W: A-J   blank: idle"
        if not self.schedule.op_types <= set(GLYPH_BASE):
            legend += "   send: >  receive: <  unshard: u  reshard: r  reduce gradients: g"
        return "\n".join(rows + [legend])


GLYPH_BASE = {"F": "0", "B": "a", "I": "k", "W": "A"}


def covered(start: float, end: float, spans: Iterable[tuple[float, float]]) -> float:
    """How much of [start, end] the (start, end) spans cover, each point once: of the gap between
    two actions, the time a rank spent waiting."""
    total, reach = 0.0, start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in spans):
        if b > max(a, reach):
            total += b - max(a, reach)
            reach = b
    return total


def _glyph(a: Action) -> str:
    base = GLYPH_BASE.get(a.op)
    return chr(ord(base) + a.mb % 10) if base is not None and a.mb is not None else ALL_OPS[a.op].glyph
