"""What a rank's collectives sent in a step, and when, on rank 0's time line: the hooks its
tensor-parallel layers, ring attention and all-to-alls call as they run and, at the step's end,
the gradient reducers' buckets, added to the step's record (StepRecord.sent, .collectives) for the
Trace to draw beside the pipeline's own messages.
"""

from __future__ import annotations

import time

from ..traffic import TrafficKind, ring_bytes
from .execute import StepRecord


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
        self.events.append(
            (kind, ring_bytes(kind, nbytes, self.tp), start + self.clock.offset, end + self.clock.offset)
        )

    def cp_hook(self, kind: TrafficKind, nbytes: int, start: float, end: float) -> None:
        """A ring attention step: `nbytes` passed on to the next cp rank."""
        self.events.append((kind, float(nbytes), start + self.clock.offset, end + self.clock.offset))

    def ep_hook(self, kind: TrafficKind, nbytes: int, start: float, end: float) -> None:
        """An all-to-all of `nbytes` over the ep group: (ep−1)/ep of it sent."""
        self.events.append(
            (kind, ring_bytes(kind, nbytes, self.ep), start + self.clock.offset, end + self.clock.offset)
        )

    def add_to(self, record: StepRecord, *reducers) -> None:
        events = list(self.events)
        for reducer in reducers:  # an edp group of one rank only divides: nothing sent, nothing to draw
            if reducer is not None and reducer.size > 1:
                events += [
                    (TrafficKind.DP_ALL_REDUCE, r.sent_bytes, r.launched_at, r.completed_at) for r in reducer.records
                ]
        for kind, nbytes, _, _ in events:
            record.sent[kind] = record.sent.get(kind, 0) + nbytes
        record.collectives = events
