"""The simulator: the validator's replay with a cost model (costs.py), giving a `Trace`.

Each action takes its stage's forward / backward / input-gradient / weight-gradient time; a
message between ranks takes latency + bytes / bandwidth. Under uniform costs and free
communication the result matches the textbook formulas in schedule/theory.py exactly
(tests/sim/test_simulate.py checks this).
"""

from __future__ import annotations

import math

from ..parallel.mesh import Mesh
from ..schedule.deadlock import validated_replay
from ..schedule.ir import Schedule
from ..schedule.ops import Action, boundary
from ..schedule.replay import collector_paused
from ..schedule.validate import check_structure
from ..trace import Event, Trace
from ..traffic import Traffic
from .costs import Costs, per_stage
from .mesh_step import simulate_mesh
from .network import Network


def simulate(
    schedule: Schedule,
    costs: Costs | None = None,
    *,
    mesh: Mesh | None = None,
    network: Network | None = None,
    traffic: Traffic | None = None,
) -> Trace:
    """Replay `schedule` on the cost model; raises ScheduleError if it cannot run.

    With a `mesh` (pipeline × data × tensor), a `network` (network.Network: links inside and
    between nodes) or `traffic` (traffic.Traffic: the collectives), pipeline slice 0 of the mesh is
    replayed with its tensor-parallel collectives inside the actions and its gradient all-reduces
    at the end (mesh_step.py)."""
    if costs is not None and not isinstance(costs, Costs):
        raise ValueError(
            f"simulate's costs are a Costs (minipipe.Costs(forward=1, backward=2, ...)), got {type(costs).__name__}"
        )
    if mesh is not None or network is not None or traffic is not None:
        return simulate_mesh(schedule, costs, mesh, network, traffic)
    with collector_paused():  # the replay's and the trace's tuples hold no cycles
        return _simulate(schedule, costs or Costs())


def _simulate(schedule: Schedule, costs: Costs) -> Trace:
    check_structure(schedule)
    times, nbytes = _replayed(schedule, costs)
    events = [
        Event(r, a, start, end)
        for r, (acts, row) in enumerate(zip(schedule.actions, times))
        for a, (start, end) in zip(acts, row)
    ]
    sent = [0.0] * schedule.p
    for d, src, _ in schedule.messages:
        sent[src] += nbytes[boundary(d)]
    return Trace(schedule, events, source="simulated", bytes_sent=[int(x) for x in sent], costs=costs)


def compute_span(schedule: Schedule, costs: Costs) -> float:
    """simulate(schedule, costs).compute_span, without building the Trace: for the planner, which
    replays schedules for their length alone. `schedule` must have passed check_structure (as
    make_schedule's do); the replay raises ScheduleError if it cannot finish."""
    times, _ = _replayed(schedule, costs)
    span: float = max(end for row in times for _, end in row) - min(start for row in times for start, _ in row)
    return span


def _replayed(schedule: Schedule, costs: Costs) -> tuple[list[list[tuple[float, float]]], list[float]]:
    """(start, end) of every action under `costs`, per rank; and the bytes crossing each boundary."""
    table = costs.table(schedule.n_stages, schedule.v)
    nbytes = per_stage(costs.activation_bytes, schedule.n_stages, "activation_bytes")

    def duration(rank: int, a: Action) -> float:
        return table[a.op][a.stage]

    def transfer(d: Action, src: int, dst: int) -> float:
        return costs.latency + nbytes[boundary(d)] / costs.bandwidth

    # no latency and nothing a bandwidth limits: messages are free, and the replay skips them
    free_links = costs.latency == 0 and (costs.bandwidth == math.inf or not any(nbytes))
    link = None if free_links else transfer
    return validated_replay(schedule, duration, link, pair=costs.pair(table)), nbytes
