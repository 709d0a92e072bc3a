"""A pipeline × data × context × expert × tensor parallel step on the cost model, collectives included.

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
- expert parallelism all-to-alls inside every mixture-of-experts layer (traffic.moe_exchanges):
  like tensor parallelism's collectives, an F pays its dispatch and combine, a B (or I) their
  gradients', each over the rank's ep group. Its experts' gradients are averaged over the edp
  group by the engine's second GradReducer, on a process group of its own: its buckets go out
  as their stages are final, one at a time, beside the dense ones rather than after them.
- an overlapped pair (DualPipe-V's F&B, Schedule.paired) is where a schedule earns its name: its
  compute costs Costs.pair's rule, and its collectives hide under that compute for the share
  `Costs.overlap` (one micro-batch's all-to-all under the other's compute, as DualPipe does it
  on a second stream): pair = compute + talk − overlap·min(talk, compute). overlap = 0 is a CPU's
  one stream: everything one after the other, as two unpaired ops.
- messages between stages take the link between the two pipeline ranks' global ranks.

Every collective becomes a `CollectiveEvent` on the Trace, the type a measured run records, with
the bytes the rank sent. A Trace's `makespan` ends with the last collective (the step is done when
its gradients are averaged); `compute_span` is the pipeline's actions alone.

What a step moves comes in a `Traffic` (traffic.py), from shapes alone (parallel/accounting.py's
step_traffic reads one off a run's plan). measured_costs.py reads the costs off a measured run
(calibrate_mesh) and compares a simulated step with it (predicted_vs_measured).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..parallel.mesh import Mesh
from ..schedule.deadlock import validated_replay
from ..schedule.ir import Schedule
from ..schedule.ops import Action, boundary
from ..schedule.validate import check_structure
from ..trace import CollectiveEvent, Event, Trace
from ..traffic import KINDS, Traffic, TrafficKind, buckets, kind_of, message_kind, ring_bytes, sent_bytes
from .costs import Costs
from .network import Link, Network


def simulate_mesh(
    schedule: Schedule,
    costs: Costs | None = None,
    mesh: Mesh | None = None,
    network: Network | None = None,
    traffic: Traffic | None = None,
    pipeline: int = 0,
) -> Trace:
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
        raise ValueError(
            f"the schedule has p={schedule.p} pipeline ranks but the {mesh.describe()} has pp={mesh.pp}; "
            f"use a mesh with pp={schedule.p}"
        )
    where = mesh.pipeline_ranks(pipeline)  # pipeline rank -> global rank; refuses a pipeline the mesh lacks
    n = schedule.n_stages
    for name, per_stage in (
        ("traffic.tp", traffic.tp),
        ("traffic.cp", traffic.cp),
        ("traffic.grads", traffic.grads),
        ("traffic.ep", traffic.ep),
        ("traffic.expert_grads", traffic.expert_grads),
    ):
        if per_stage and len(per_stage) != n:
            raise ValueError(f"{name} has {len(per_stage)} entries for {n} stages; give one per stage")
    table = costs.table(n, schedule.v)
    nbytes = costs.activation_bytes
    nbytes = [float(nbytes)] * n if isinstance(nbytes, (int, float)) else [float(x) for x in nbytes]
    if len(nbytes) != n:
        raise ValueError(f"activation_bytes: got {len(nbytes)} values for {n} stages; give one number or one per stage")
    owner = schedule.placement
    groups = [{axis: mesh.group(g, axis) for axis in ("tp", "cp", "ep")} for g in where]

    def priced(s: int, kind: TrafficKind, nb: float) -> tuple[TrafficKind, float, int, float]:
        # (kind, bytes, group size, time) of one collective or ring step
        group = groups[owner[s]][kind.axis]
        return kind, nb, len(group), network.talk(kind, nb, group)

    talk = [
        {op: [priced(s, kind, nb) for kind, nb in ops] for op, ops in _inside(traffic, s).items()} for s in range(n)
    ]
    extra = [{op: sum(t for *_, t in ops) for op, ops in talk[s].items()} for s in range(n)]

    def duration(rank: int, a: Action) -> float:
        return table[a.op][a.stage] + extra[a.stage].get(a.op, 0.0)

    compute_pair = costs.pair(table) or (lambda rank, f, b: table[f.op][f.stage] + table[b.op][b.stage])

    def pair(rank: int, f: Action, b: Action) -> float:
        compute = compute_pair(rank, f, b)
        said = extra[f.stage].get(f.op, 0.0) + extra[b.stage].get(b.op, 0.0)
        return compute + said - costs.overlap * min(said, compute)

    def transfer(d: Action, src: int, dst: int) -> float:
        return network.send(nbytes[boundary(d)], where[src], where[dst])

    times = validated_replay(schedule, duration, transfer, pair=pair)
    events = [
        Event(r, a, start, end)
        for r, (acts, row) in enumerate(zip(schedule.actions, times))
        for a, (start, end) in zip(acts, row)
    ]

    sent = [dict.fromkeys(KINDS, 0.0) for _ in range(schedule.p)]
    p2p = [0.0] * schedule.p
    for d, src, _ in schedule.messages:
        sent[src][message_kind(d)] += nbytes[boundary(d)]
        p2p[src] += nbytes[boundary(d)]

    talks = []
    for e in events:  # tensor-parallel collectives, ring attention steps and all-to-alls, inside their action
        ops = talk[e.action.stage].get(e.action.op, ())
        if not ops:
            continue
        # a paired action's share of its pair may be shorter than its compute and talk: the
        # collectives are drawn packed into it, in order
        squeeze = min(1.0, e.duration / duration(e.rank, e.action)) if duration(e.rank, e.action) else 1.0
        share, t = squeeze * table[e.action.op][e.action.stage] / len(ops), e.start
        for kind, nb, size, dur in ops:
            t += share
            dur *= squeeze
            mine = sent_bytes(kind, nb, size)
            talks.append(CollectiveEvent(e.rank, kind, t, t + dur, mine))
            sent[e.rank][kind] += mine
            t += dur
    if mesh.size("dp_cp") > 1 and traffic.grads:
        talks += _gradient_allreduces(schedule, events, traffic.grads, "dp_cp", traffic, mesh, network, where, sent)
    if mesh.size("edp") > 1 and traffic.expert_grads:  # and the experts', beside them on a group of their own
        talks += _gradient_allreduces(
            schedule, events, traffic.expert_grads, "edp", traffic, mesh, network, where, sent
        )
    talks.sort(key=lambda c: (c.start, c.rank))
    return Trace(
        schedule,
        events,
        source="simulated",
        bytes_sent=[int(x) for x in p2p],
        collectives=talks,
        traffic=sent,
        costs=costs,
        meta={"mesh": mesh, "network": network, "pipeline": pipeline},
    )


def _inside(traffic: Traffic, stage: int) -> dict[str, list[tuple[TrafficKind, float]]]:
    """What stage `stage`'s ops run inside them, per op: its tensor-parallel collectives, then its
    ring attention steps, then its all-to-alls."""
    out: dict[str, list[tuple[TrafficKind, float]]] = {}
    for per_stage in (traffic.tp, traffic.cp, traffic.ep):
        for op, ops in (per_stage[stage] if per_stage else {}).items():
            out.setdefault(op, []).extend((kind_of(kind), nb) for kind, nb in ops)
    return out


def _gradient_allreduces(
    schedule: Schedule,
    events: list[Event],
    grads: Sequence[Sequence[int]],
    axis: str,
    traffic: Traffic,
    mesh: Mesh,
    network: Network,
    where: Sequence[int],
    sent: list[dict[TrafficKind, float]],
) -> list[CollectiveEvent]:
    """Each rank's buckets of `grads` over its `axis` group: ready when their stages' last
    backward ends, sent in order, one at a time on that group (the engine's GradReducer for it:
    the dense one and the experts' each send their own buckets, on their own process groups, at
    the same time)."""
    free = [0.0] * schedule.p  # when each rank's previous bucket on this group is done
    final: dict[int, float] = {}
    for e in events:
        if e.action.op in ("B", "W"):
            final[e.action.stage] = max(final.get(e.action.stage, 0.0), e.end)
    out = []
    for q in range(schedule.p):
        stage_of, sizes = [], []
        for s in schedule.stages_of(q):
            sizes += list(grads[s])
            stage_of += [s] * len(grads[s])
        group = mesh.group(where[q], axis)  # every rank with these parameters: dp × cp, or edp
        for members in buckets(sizes, traffic.bucket_bytes):
            nb = sum(sizes[i] for i in members)
            start = max(free[q], max(final[stage_of[i]] for i in members))
            free[q] = start + network.collective(TrafficKind.DP_ALL_REDUCE, nb, group)
            nbytes = ring_bytes(TrafficKind.DP_ALL_REDUCE, nb, len(group))
            out.append(CollectiveEvent(q, TrafficKind.DP_ALL_REDUCE, start, free[q], nbytes))
            sent[q][TrafficKind.DP_ALL_REDUCE] += nbytes
    return out


def step_time(trace: Trace) -> float:
    """The whole step: from the first action or collective to the last one's end (Trace.makespan)."""
    return trace.makespan
