"""The simulator: the validator's replay with a cost model, giving a `Trace`.

Each action takes its stage's forward / backward / weight-gradient time; a message between
ranks takes latency + bytes / bandwidth. Under uniform costs and free communication the result
matches the textbook formulas in theory.py exactly (tests/test_simulate.py checks this).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

from .schedule import Schedule
from .trace import Event, Trace
from .validate import boundary, check_structure, replay, transfers

PerStage = Union[float, Sequence[float]]


@dataclass(frozen=True)
class Costs:
    """Per-stage time of one micro-batch (any unit; the trace calls it ms), and the links.

    forward, backward: a number for every stage, or one per stage (e.g. measured).
    weight: the part of `backward` that is the weight gradient; only used by schedules that
        split backward into B (input gradient) and W. Default: half of backward.
    stage_scale: multipliers for chosen stages, e.g. {3: 1.5} makes stage 3 half again slower.
    latency, bandwidth: each message costs latency + bytes / bandwidth.
    activation_bytes: bytes of one micro-batch's activation leaving each stage (gradients
        going back are the same size).
    """

    forward: PerStage = 1.0
    backward: PerStage = 2.0
    weight: PerStage | None = None
    stage_scale: Mapping[int, float] | Sequence[float] = ()
    latency: float = 0.0
    bandwidth: float = math.inf
    activation_bytes: PerStage = 0.0

    def table(self, n_stages: int) -> dict[str, list[float]]:
        """Compute time of F, B, W on each stage."""
        scale = [1.0] * n_stages
        items = self.stage_scale.items() if isinstance(self.stage_scale, Mapping) else enumerate(self.stage_scale)
        for s, k in items:
            if not 0 <= s < n_stages:
                raise ValueError(f"stage_scale names stage {s}, but stages are 0..{n_stages - 1}")
            if k <= 0:
                raise ValueError(f"stage_scale for stage {s} must be > 0, got {k}")
            scale[s] = float(k)
        f = _per_stage(self.forward, n_stages, "forward")
        b = _per_stage(self.backward, n_stages, "backward")
        w = _per_stage(self.weight, n_stages, "weight") if self.weight is not None else [x / 2 for x in b]
        return {"F": [x * k for x, k in zip(f, scale)],
                "B": [x * k for x, k in zip(b, scale)],
                "B_split": [(x - y) * k for x, y, k in zip(b, w, scale)],
                "W": [y * k for y, k in zip(w, scale)]}


def _per_stage(value: PerStage, n: int, name: str) -> list[float]:
    values = [float(value)] * n if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(values) != n:
        raise ValueError(f"{name} costs: got {len(values)} values for {n} stages; give one number or one per stage")
    if any(x < 0 or math.isnan(x) for x in values):
        raise ValueError(f"{name} costs must be >= 0, got {values}")
    return values


def simulate(schedule: Schedule, costs: Costs | None = None) -> Trace:
    """Replay `schedule` on the cost model; raises ScheduleError if it cannot run."""
    costs = costs or Costs()
    if costs.latency < 0 or costs.bandwidth <= 0:
        raise ValueError(f"latency must be >= 0 and bandwidth > 0, got {costs.latency} and {costs.bandwidth}")
    check_structure(schedule)
    table = costs.table(schedule.n_stages)
    if schedule.split_backward:
        table["B"] = table["B_split"]
    nbytes = _per_stage(costs.activation_bytes, schedule.n_stages, "activation_bytes")

    def duration(rank, a):
        return table[a.op][a.stage]

    def transfer(d, src, dst):
        return costs.latency + nbytes[boundary(d)] / costs.bandwidth

    free_links = costs.latency == 0 and (costs.bandwidth == math.inf or not any(nbytes))
    times = replay(schedule, duration, None if free_links else transfer)
    events = [Event(r, a, start, end)
              for r, (acts, row) in enumerate(zip(schedule.actions, times))
              for a, (start, end) in zip(acts, row)]
    sent = [0.0] * schedule.p
    for d, src, _ in transfers(schedule):
        sent[src] += nbytes[boundary(d)]
    return Trace(schedule, events, source="simulated", bytes_sent=[int(x) for x in sent],
                 meta={"costs": costs})


def calibrate(traces: Trace | Sequence[Trace]) -> Costs:
    """Costs read off measured traces (one step or several of the same schedule): each stage's
    median forward, backward and weight-gradient time, and the median delivery latency of a
    message (from the producer's end to the end of a receive that was already waiting)."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    schedule = traces[0].schedule
    by = {op: [[] for _ in range(schedule.n_stages)] for op in "FBW"}
    delays = []
    for trace in traces:
        end = {}
        for e in trace.events:
            by[e.action.op][e.action.stage].append(e.duration)
            end[str(e.action)] = e.end
        delays += [w.end - end[w.what[5:]] for w in trace.waits
                   if w.what.startswith("recv ") and w.what[5:] in end and w.start <= end[w.what[5:]]]
    f, b = ([_median(x) for x in by[op]] for op in "FB")
    latency = max(0.0, _median(delays))
    if schedule.split_backward:
        w = [_median(x) for x in by["W"]]
        return Costs(forward=f, backward=[x + y for x, y in zip(b, w)], weight=w, latency=latency)
    return Costs(forward=f, backward=b, latency=latency)


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2] if xs else 0.0
