"""The simulator: the validator's replay with a cost model, giving a `Trace`.

Each action takes its stage's forward / backward / input-gradient / weight-gradient time; a
message between ranks takes latency + bytes / bandwidth. Under uniform costs and free
communication the result matches the textbook formulas in theory.py exactly
(tests/test_simulate.py checks this).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

from ..schedule.ir import Schedule
from ..schedule.ops import OPS, boundary
from ..schedule.validate import check_structure, replay, transfers
from ..trace import Event, Trace

PerStage = Union[float, Sequence[float]]


@dataclass(frozen=True)
class Costs:
    """What one micro-batch costs (any unit; the trace calls it ms), and what the links cost.

    forward, backward: one number is a rank's share of the model — the same model whatever the
        schedule, so with v chunks per rank each chunk costs 1/v of it, and interleaving is
        compared with 1F1B on equal terms. A list gives every stage its own time (e.g. measured
        by `calibrate`), taken as it is.
    weight: the part of `backward` that is the weight gradient (W), when a schedule splits a
        backward into I (input gradient, backward − weight) and W. Default: half of backward.
        It must not exceed backward.
    stage_scale: multipliers for chosen stages, e.g. {3: 1.5} makes stage 3 half again slower
        (every op on it: F, B, I and W).
    latency, bandwidth: each message costs latency + bytes / bandwidth.
    activation_bytes: bytes of one micro-batch's activation leaving each stage (gradients
        going back are the same size).
    overlap: for schedules that pair a forward with a backward (DualPipe-V's F&B), the share of
        the shorter of the two hidden under the longer: a pair costs F + B − overlap·min(F, B).
        0 (the default) is one stream, as on a CPU: the two run one after the other; on a GPU,
        with the pair's communication on its own stream, it comes near 1.
    recompute: the share of each stage's forward its backward runs again (activation
        recomputation, sim/recompute.py): 1 for RunConfig(recompute="stage"), a chosen layers'
        share for layers, 0 (the default) for none. B and I cost that much more; W does not.
    """

    forward: PerStage = 1.0
    backward: PerStage = 2.0
    weight: PerStage | None = None
    stage_scale: Mapping[int, float] | Sequence[float] = ()
    latency: float = 0.0
    bandwidth: float = math.inf
    activation_bytes: PerStage = 0.0
    overlap: float = 0.0
    recompute: PerStage = 0.0

    def __post_init__(self):
        if isinstance(self.weight, (int, float)) and isinstance(self.backward, (int, float)) \
                and self.weight > self.backward:
            raise ValueError(f"weight={self.weight} is the weight-gradient part of backward={self.backward}, so it "
                             f"cannot exceed it; use weight <= {self.backward}")
        if not self.latency >= 0 or not self.bandwidth > 0:
            raise ValueError(f"latency must be >= 0 and bandwidth > 0, got {self.latency} and {self.bandwidth}")
        if not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap is the share of a paired forward and backward hidden under each other, "
                             f"from 0 (none) to 1 (all of the shorter one); got {self.overlap}")

    def pair(self, table: dict[str, list[float]]):
        """The time of an overlapped forward-and-backward pair on its stages, for replay; None when
        nothing overlaps (the two ops' own times, one after the other)."""
        if not self.overlap:
            return None

        def pair(rank, f, b):
            a, c = table["F"][f.stage], table[b.op][b.stage]
            return a + c - self.overlap * min(a, c)
        return pair

    def table(self, n_stages: int, v: int = 1) -> dict[str, list[float]]:
        """Compute time of F, B, I and W on each of `n_stages` stages, v of them per rank."""
        scale = [1.0] * n_stages
        items = self.stage_scale.items() if isinstance(self.stage_scale, Mapping) else enumerate(self.stage_scale)
        for s, k in items:
            if not 0 <= s < n_stages:
                raise ValueError(f"stage_scale names stage {s}, but stages are 0..{n_stages - 1}")
            if not k > 0:
                raise ValueError(f"stage_scale for stage {s} must be > 0, got {k}")
            scale[s] = float(k)
        f = _per_stage(self.forward, n_stages, "forward", v)
        b = _per_stage(self.backward, n_stages, "backward", v)
        w = _per_stage(self.weight, n_stages, "weight", v) if self.weight is not None else [x / 2 for x in b]
        for s, (x, y) in enumerate(zip(b, w)):
            if y > x:
                raise ValueError(f"stage {s}: the weight gradient ({y:g}) is part of the backward ({x:g}) and cannot "
                                 f"exceed it; lower weight or raise backward")
        redo = [x * r for x, r in zip(f, _shares(self.recompute, n_stages))]   # a recomputing backward: F_r + B
        return {"F": [x * k for x, k in zip(f, scale)],
                "B": [(x + r) * k for x, r, k in zip(b, redo, scale)],
                "I": [(x - y + r) * k for x, y, r, k in zip(b, w, redo, scale)],
                "W": [y * k for y, k in zip(w, scale)]}


def _shares(value: PerStage, n: int) -> list[float]:
    shares = [float(value)] * n if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(shares) != n or any(not 0 <= x <= 1 for x in shares):
        raise ValueError(f"recompute is the share of each stage's forward run again, from 0 to 1: one number or one "
                         f"per stage ({n}); got {value!r}")
    return shares


def _per_stage(value: PerStage, n: int, name: str, v: int = 1) -> list[float]:
    """One number is a rank's share, split over its v chunks; a list is per stage, as given."""
    values = [float(value) / v] * n if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(values) != n:
        raise ValueError(f"{name} costs: got {len(values)} values for {n} stages; give one number or one per stage")
    if any(x < 0 or math.isnan(x) for x in values):
        raise ValueError(f"{name} costs must be >= 0, got {values}")
    return values


def simulate(schedule: Schedule, costs: Costs | None = None, *, mesh=None, network=None, traffic=None) -> Trace:
    """Replay `schedule` on the cost model; raises ScheduleError if it cannot run.

    With a `mesh` (pipeline × data × tensor), a `network` (network.Network: links inside and
    between nodes) or `traffic` (simulate_mesh.Traffic: the collectives), pipeline slice 0 of the
    mesh is replayed with its tensor-parallel collectives inside the actions and its gradient
    all-reduces at the end (simulate_mesh.py)."""
    if mesh is not None or network is not None or traffic is not None:
        from .mesh import simulate_mesh

        return simulate_mesh(schedule, costs, mesh, network, traffic)
    costs = costs or Costs()
    check_structure(schedule)
    table = costs.table(schedule.n_stages, schedule.v)
    nbytes = _per_stage(costs.activation_bytes, schedule.n_stages, "activation_bytes")

    def duration(rank, a):
        return table[a.op][a.stage]

    def transfer(d, src, dst):
        return costs.latency + nbytes[boundary(d)] / costs.bandwidth

    free_links = costs.latency == 0 and (costs.bandwidth == math.inf or not any(nbytes))
    times = replay(schedule, duration, None if free_links else transfer, pair=costs.pair(table))
    events = [Event(r, a, start, end)
              for r, (acts, row) in enumerate(zip(schedule.actions, times))
              for a, (start, end) in zip(acts, row)]
    sent = [0.0] * schedule.p
    for d, src, _ in transfers(schedule):
        sent[src] += nbytes[boundary(d)]
    return Trace(schedule, events, source="simulated", bytes_sent=[int(x) for x in sent], costs=costs)


def calibrate(traces: Trace | Sequence[Trace]) -> Costs:
    """Costs read off measured traces (one step or several of the same schedule): each stage's
    median forward and backward time (a B, or an I and a W), its weight-gradient part, and the
    median delivery latency of a message (from the producer's end to the end of a receive that
    was already waiting)."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    schedule = traces[0].schedule
    by = {op: [[] for _ in range(schedule.n_stages)] for op in OPS}
    delays = []
    for trace in traces:
        end = {}
        for e in trace.events:
            by[e.action.op][e.action.stage].append(e.duration)
            end[e.action] = e.end
        delays += [w.end - end[w.action] for w in trace.waits
                   if w.kind == "recv" and w.action in end and w.start <= end[w.action]]
    f, b, w = [], [], []
    for s in range(schedule.n_stages):
        f.append(_median(by["F"][s]))
        split = _median(by["I"][s]) + _median(by["W"][s])
        b.append(_median(by["B"][s]) if by["B"][s] else split)
        w.append(min(b[-1], _median(by["W"][s])) if by["W"][s] else b[-1] / 2)
    return Costs(forward=f, backward=b, weight=w, latency=max(0.0, _median(delays)))


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2] if xs else 0.0
