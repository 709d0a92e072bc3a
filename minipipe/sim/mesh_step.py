"""A pipeline × data × context × tensor parallel step on the cost model, collectives included.

The pipeline simulator (pipeline.py) replays one pipeline's schedule. Here the same replay runs
one pipeline slice of a mesh (parallel/mesh.py) — by default slice 0, the one a measured run's
`RunResult.traces` shows — and adds what the other axes cost, on the links of a `Network`
(network.py: inside a node or between nodes, chosen from the ranks' places):

- tensor parallelism talks inside every layer, so an action lasts its compute plus its
  collectives: an F its forward ones, a B (or the I of a split backward: the input gradient needs
  them) its backward ones, a W none. Each collective is drawn after an equal share of the
  action's compute, as in a Megatron block (attention, then its all-reduce; the MLP, then its).
- context parallelism's ring attention steps likewise (traffic.ring_attention_steps: cp − 1 in
  an F per attention layer, cp in its B or I), each one point-to-point step on the cp group's link
  (the ring is as slow as its slowest hop), not overlapped with the compute, as the engine runs
  them (parallel/ring_attention.py).
- data parallelism averages the gradients once a step (over dp × cp), in buckets grouped as parallel/data.py
  groups them (traffic.buckets: last layers first). A stage's gradients are final when its last backward (B, or
  W) ends; a bucket starts when its stages are final and the bucket before it is done (they go
  out in order, one at a time), so the all-reduces overlap the pipeline's cool-down on every rank
  but the one that finishes last.
- messages between stages take the link between the two pipeline ranks' global ranks.

Every collective becomes a `CollectiveEvent` on the Trace, the type a measured run records, with
the bytes the rank sent. A Trace's `makespan` ends with the last collective (the step is done when
its gradients are averaged); `compute_span` is the pipeline's actions alone.

What a step moves comes in a `Traffic` (traffic.py), from shapes alone (parallel/accounting.py's
step_traffic reads one off a run's plan). measured_costs.py reads the costs off a measured run
(calibrate_mesh) and compares a simulated step with it (predicted_vs_measured).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..parallel.mesh import Mesh
from ..schedule.ir import Schedule
from ..schedule.ops import boundary
from ..schedule.validate import check_structure, validated_replay
from ..trace import CollectiveEvent, Event, Trace
from ..traffic import KINDS, Traffic, TrafficKind, buckets, message_kind, ring_bytes, sent_bytes
from .costs import Costs
from .network import Link, Network

def simulate_mesh(schedule: Schedule, costs=None, mesh: Mesh | None = None, network: Network | None = None,
                  traffic: Traffic | None = None, pipeline: int = 0) -> Trace:
    """Replay pipeline slice `pipeline` of `mesh` (default: slice 0) on the cost model with its
    collectives; see the module docstring. `costs`: compute per op and activation bytes
    (simulate.Costs); `network`: the links (default: one link with costs.latency and
    costs.bandwidth); `traffic`: the collectives (default: none)."""
    costs = costs or Costs()
    mesh = mesh or Mesh(schedule.p)
    traffic = traffic or Traffic()
    network = network or Network.uniform(Link(costs.bandwidth, costs.latency))
    check_structure(schedule)
    if mesh.pp != schedule.p:
        raise ValueError(f"the schedule has p={schedule.p} pipeline ranks but the {mesh.describe()} has pp={mesh.pp}; "
                         f"use a mesh with pp={schedule.p}")
    if not 0 <= pipeline < mesh.n_pipelines:
        raise ValueError(f"pipeline must be in 0..{mesh.n_pipelines - 1} for {mesh.describe()}, got {pipeline!r}")
    n = schedule.n_stages
    for name, per_stage in (("traffic.tp", traffic.tp), ("traffic.cp", traffic.cp), ("traffic.grads", traffic.grads)):
        if per_stage and len(per_stage) != n:
            raise ValueError(f"{name} has {len(per_stage)} entries for {n} stages; give one per stage")
    table = costs.table(n, schedule.v)
    nbytes = costs.activation_bytes
    nbytes = [float(nbytes)] * n if isinstance(nbytes, (int, float)) else [float(x) for x in nbytes]
    if len(nbytes) != n:
        raise ValueError(f"activation_bytes: got {len(nbytes)} values for {n} stages; give one number or one per stage")
    where = mesh.pipeline_ranks(pipeline)    # pipeline rank -> global rank
    owner = schedule.placement
    groups = [{axis: mesh.group(g, axis) for axis in ("tp", "cp")} for g in where]

    def priced(s, kind, nb):      # (kind, bytes, group size, time) of one collective or ring step
        group = groups[owner[s]][kind.axis]
        return kind, nb, len(group), network.talk(kind, nb, group)
    talk = [{op: [priced(s, kind, nb) for kind, nb in ops] for op, ops in _inside(traffic, s).items()}
            for s in range(n)]
    extra = [{op: sum(t for *_, t in ops) for op, ops in talk[s].items()} for s in range(n)]

    def duration(rank, a):
        return table[a.op][a.stage] + extra[a.stage].get(a.op, 0.0)

    def transfer(d, src, dst):
        return network.send(nbytes[boundary(d)], where[src], where[dst])

    times = validated_replay(schedule, duration, transfer, pair=costs.pair(table))
    events = [Event(r, a, start, end)
              for r, (acts, row) in enumerate(zip(schedule.actions, times))
              for a, (start, end) in zip(acts, row)]

    sent = [dict.fromkeys(KINDS, 0.0) for _ in range(schedule.p)]
    p2p = [0.0] * schedule.p
    for d, src, _ in schedule.messages:
        sent[src][message_kind(d)] += nbytes[boundary(d)]
        p2p[src] += nbytes[boundary(d)]

    talks = []
    for e in events:       # tensor-parallel collectives and ring attention steps, inside their action
        ops = talk[e.action.stage].get(e.action.op, ())
        if not ops:
            continue
        share, t = table[e.action.op][e.action.stage] / len(ops), e.start
        for kind, nb, size, dur in ops:
            t += share
            mine = sent_bytes(kind, nb, size)
            talks.append(CollectiveEvent(e.rank, kind, t, t + dur, mine))
            sent[e.rank][kind] += mine
            t += dur
    if mesh.size("dp_cp") > 1 and traffic.grads:
        talks += _gradient_allreduces(schedule, events, traffic, mesh, network, where, sent)
    talks.sort(key=lambda c: (c.start, c.rank))
    return Trace(schedule, events, source="simulated", bytes_sent=[int(x) for x in p2p], collectives=talks,
                 traffic=sent, costs=costs, meta={"mesh": mesh, "network": network, "pipeline": pipeline})


def _inside(traffic: Traffic, stage: int) -> dict[str, list[tuple[TrafficKind, float]]]:
    """What stage `stage`'s ops run inside them, per op: its tensor-parallel collectives, then its
    ring attention steps."""
    out: dict[str, list] = {}
    for per_stage in (traffic.tp, traffic.cp):
        for op, ops in (per_stage[stage] if per_stage else {}).items():
            out.setdefault(op, []).extend((TrafficKind(kind), nb) for kind, nb in ops)
    return out


def _gradient_allreduces(schedule, events, traffic, mesh, network, where, sent) -> list[CollectiveEvent]:
    """Each rank's buckets: ready when their stages' last backward ends, sent in order."""
    final = {}
    for e in events:
        if e.action.op in ("B", "W"):
            final[e.action.stage] = max(final.get(e.action.stage, 0.0), e.end)
    out = []
    for q in range(schedule.p):
        stage_of, sizes = [], []
        for s in schedule.stages_of(q):
            sizes += list(traffic.grads[s])
            stage_of += [s] * len(traffic.grads[s])
        group = mesh.group(where[q], "dp_cp")     # every rank with these parameters: dp × cp
        free = 0.0
        for members in buckets(sizes, traffic.bucket_bytes):
            nb = sum(sizes[i] for i in members)
            start = max(free, max(final[stage_of[i]] for i in members))
            free = start + network.collective(TrafficKind.DP_ALL_REDUCE, nb, group)
            nbytes = ring_bytes(TrafficKind.DP_ALL_REDUCE, nb, len(group))
            out.append(CollectiveEvent(q, TrafficKind.DP_ALL_REDUCE, start, free, nbytes))
            sent[q][TrafficKind.DP_ALL_REDUCE] += nbytes
    return out


def step_time(trace: Trace) -> float:
    """The whole step: from the first action or collective to the last one's end (Trace.makespan)."""
    return trace.makespan
