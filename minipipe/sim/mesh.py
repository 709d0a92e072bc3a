"""A pipeline × data × tensor parallel step on the cost model, collectives included.

The pipeline simulator (simulate.py) replays one pipeline's schedule. Here the same replay runs
one pipeline slice of a mesh (mesh.py) — by default slice 0, the one a measured run's
`RunResult.traces` shows — and adds what the other two axes cost, on the links of a `Network`
(network.py: inside a node or between nodes, chosen from the ranks' places):

- tensor parallelism talks inside every layer, so an action lasts its compute plus its
  collectives: an F its forward ones, a B (or the I of a split backward: the input gradient needs
  them) its backward ones, a W none. Each collective is drawn after an equal share of the
  action's compute, as in a Megatron block (attention, then its all-reduce; the MLP, then its).
- data parallelism averages the gradients once a step, in buckets grouped as parallel/data.py
  groups them (last layers first). A stage's gradients are final when its last backward (B, or
  W) ends; a bucket starts when its stages are final and the bucket before it is done (they go
  out in order, one at a time), so the all-reduces overlap the pipeline's cool-down on every rank
  but the one that finishes last.
- messages between stages take the link between the two pipeline ranks' global ranks.

Every collective becomes a `CollectiveEvent` on the Trace, the type a measured run records, with
the bytes the rank sent. A Trace's `makespan` ends with the last collective (the step is done when
its gradients are averaged); `compute_span` is the pipeline's actions alone.

`calibrate_run(result)` reads the costs off a measured run (compute per op with the
tensor-parallel collectives taken out, one link fitted to the collectives and messages it
timed), and `predicted_vs_measured(result)` simulates the run with them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..parallel.mesh import Mesh
from ..schedule.ir import Schedule
from ..schedule.ops import boundary
from ..schedule.validate import check_structure, replay, transfers
from ..trace import CollectiveEvent, Event, Trace, covered
from .network import DEFAULT_BUCKET_BYTES, Link, Network, buckets, ring_steps, wire_bytes

TP_OPS = {"forward": ("F",), "backward": ("B", "I")}   # which ops run a layer's collectives of each phase


@dataclass(frozen=True)
class Traffic:
    """What a step moves besides the activations between stages, from shapes alone.

    tp: per stage, {op: [(kind, nbytes), ...]}: the tensor-parallel collectives one micro-batch
        runs in that op, in order; kind as in accounting.KINDS ("tp all-reduce", "tp all-gather"),
        nbytes the whole tensor (the buffer all-reduced, the result gathered). Empty: no tp.
    grads: per stage, the bytes of each parameter's gradient (this rank's tp shard), in model
        order. Empty: no data parallelism to simulate.
    bucket_bytes: gradient bytes per all-reduce, as RunConfig.dp_bucket_bytes.
    """

    tp: Sequence[Mapping[str, Sequence[tuple[str, float]]]] = ()
    grads: Sequence[Sequence[int]] = ()
    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    @classmethod
    def of_plan(cls, plan, layers=None) -> "Traffic":
        """The traffic of a run's Plan (config.prepare); `layers`: the whole model's layers
        (default: built from the plan's config)."""
        from ..models.catalog import task_of
        from ..parallel.accounting import TP_KIND
        from ..parallel.tensor import collectives, tensor_parallel

        layers = layers if layers is not None else task_of(plan.config).layers()
        tp, cut = plan.mesh.tp, plan.partition
        calls, grads = [], []
        for s in range(cut.n_stages):
            per_op = {"F": [], "B": [], "I": []}
            sizes = []
            for i in cut.layers_of(s):
                shape, dtype = plan.layer_shapes[i]
                for c in collectives(layers[i], shape, tp, dtype, input_grad=i > 0):
                    for op in TP_OPS[c.phase]:
                        per_op[op].append((TP_KIND[c.kind], c.nbytes))
                layer = tensor_parallel(layers[i], 0, tp) if tp > 1 else layers[i]
                sizes += [p.numel() * p.element_size() for p in layer.parameters() if p.requires_grad]
            calls.append(per_op)
            grads.append(sizes)
        return cls(tuple(calls), tuple(grads), plan.config.dp_bucket_bytes)


def _kind(name: str) -> str:
    """'tp all-reduce' -> 'all-reduce'."""
    return name.split(" ", 1)[1]


def simulate_mesh(schedule: Schedule, costs=None, mesh: Mesh | None = None, network: Network | None = None,
                  traffic: Traffic | None = None, pipeline: int = 0) -> Trace:
    """Replay pipeline slice `pipeline` of `mesh` (default: slice 0) on the cost model with its
    collectives; see the module docstring. `costs`: compute per op and activation bytes
    (simulate.Costs); `network`: the links (default: one link with costs.latency and
    costs.bandwidth); `traffic`: the collectives (default: none)."""
    from .pipeline import Costs

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
    for name, per_stage in (("traffic.tp", traffic.tp), ("traffic.grads", traffic.grads)):
        if per_stage and len(per_stage) != n:
            raise ValueError(f"{name} has {len(per_stage)} entries for {n} stages; give one per stage")
    table = costs.table(n, schedule.v)
    nbytes = costs.activation_bytes
    nbytes = [float(nbytes)] * n if isinstance(nbytes, (int, float)) else [float(x) for x in nbytes]
    if len(nbytes) != n:
        raise ValueError(f"activation_bytes: got {len(nbytes)} values for {n} stages; give one number or one per stage")
    dp_coord, tp_coord = divmod(pipeline, mesh.tp)
    where = [mesh.rank(q, dp_coord, tp_coord) for q in range(schedule.p)]    # pipeline rank -> global rank
    owner = schedule.placement
    tp_group = [mesh.group(g, "tp") for g in where]
    calls = [traffic.tp[s] if traffic.tp else {} for s in range(n)]
    talk = [{op: [(kind, nb, network.collective(_kind(kind), nb, tp_group[owner[s]])) for kind, nb in ops]
             for op, ops in calls[s].items()} for s in range(n)]
    extra = [{op: sum(t for _, _, t in ops) for op, ops in talk[s].items()} for s in range(n)]

    def duration(rank, a):
        return table[a.op][a.stage] + extra[a.stage].get(a.op, 0.0)

    def transfer(d, src, dst):
        return network.send(nbytes[boundary(d)], where[src], where[dst])

    times = replay(schedule, duration, transfer, pair=costs.pair(table))
    events = [Event(r, a, start, end)
              for r, (acts, row) in enumerate(zip(schedule.actions, times))
              for a, (start, end) in zip(acts, row)]

    kinds = ("pp activation", "pp gradient", "tp all-reduce", "tp all-gather", "dp all-reduce")
    sent = [dict.fromkeys(kinds, 0.0) for _ in range(schedule.p)]
    p2p = [0.0] * schedule.p
    for d, src, _ in transfers(schedule):
        sent[src]["pp activation" if d.op == "F" else "pp gradient"] += nbytes[boundary(d)]
        p2p[src] += nbytes[boundary(d)]

    talks = []
    for e in events:       # tensor-parallel collectives, inside their action
        ops = talk[e.action.stage].get(e.action.op, ())
        if not ops:
            continue
        share, t = table[e.action.op][e.action.stage] / len(ops), e.start
        for kind, nb, dur in ops:
            t += share
            sent_bytes = wire_bytes(_kind(kind), nb, mesh.tp)
            talks.append(CollectiveEvent(e.rank, kind, t, t + dur, sent_bytes))
            sent[e.rank][kind] += sent_bytes
            t += dur
    if mesh.dp > 1 and traffic.grads:
        talks += _gradient_allreduces(schedule, events, traffic, mesh, network, where, sent)
    talks.sort(key=lambda c: (c.start, c.rank))
    return Trace(schedule, events, source="simulated", bytes_sent=[int(x) for x in p2p], collectives=talks,
                 traffic=sent, costs=costs, meta={"mesh": mesh, "network": network, "pipeline": pipeline})


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
        group = mesh.group(where[q], "dp")
        free = 0.0
        for members in buckets(sizes, traffic.bucket_bytes):
            nb = sum(sizes[i] for i in members)
            start = max(free, max(final[stage_of[i]] for i in members))
            free = start + network.all_reduce(nb, group)
            sent_bytes = wire_bytes("all-reduce", nb, mesh.dp)
            out.append(CollectiveEvent(q, "dp all-reduce", start, free, sent_bytes))
            sent[q]["dp all-reduce"] += sent_bytes
    return out


def step_time(trace: Trace) -> float:
    """The whole step: from the first action or collective to the last one's end (Trace.makespan)."""
    return trace.makespan


# -- calibration from a measured run ----------------------------------------------------------
@dataclass
class Calibration:
    """Costs read off a measured run: compute per op (collectives taken out), one link fitted to
    what the run timed, and the run's traffic from its shapes."""

    costs: object                 # simulate.Costs
    network: Network
    traffic: Traffic
    observations: dict = field(default_factory=dict)   # how many timings of each kind the link was fitted to


def calibrate_run(result, traces: Sequence[Trace] | None = None) -> Calibration:
    """Read a simulation's costs off a measured RunResult (its traced steps of pipeline slice 0).

    compute: each stage's median F, B (or I and W) with the tensor-parallel collectives inside the
        action subtracted (they are timed on their own) and the executor's time after it added
        (posting its sends, bookkeeping: the gap to the rank's next action less its waits);
    link: latency and bandwidth fitted (least squares, both >= 0; see fit_link) to every
        timing that says what a transfer costs: each tensor-parallel collective (steps·latency +
        bytes sent / bandwidth), each gradient bucket's time after the rank's last action (one
        bucket at a time, from the later of the previous bucket's end and where the last action
        would have ended at its typical length: a bucket launched during the backward slows it
        down, and gloo only notices its end when waited for, so what the step pays is the tail,
        which is also where the simulator puts a rank's buckets), each message whose receive was
        already waiting (latency + bytes / bandwidth).
    """
    from ..parallel.accounting import tensor_bytes
    from .pipeline import Costs

    traces = list(traces if traces is not None else result.traces)
    plan = result.plan
    schedule, mesh = plan.schedule, plan.mesh
    nbytes = [tensor_bytes(*plan.shapes[s]) for s in range(schedule.n_stages)]
    by = {op: [[] for _ in range(schedule.n_stages)] for op in ("F", "B", "I", "W")}
    obs: list[tuple[float, float, float, str]] = []     # (steps, bytes sent, seconds, what)
    tails = []                                          # (a rank's last event, its compute, its gradient all-reduces)
    for trace in traces:
        talks = [[c for c in trace.collectives if c.rank == r] for r in range(trace.p)]
        after = _overheads(trace)
        end, spent = {}, {}
        for e in trace.events:
            inside = sum(c.end - c.start for c in talks[e.rank]
                         if c.kind.startswith("tp") and c.start >= e.start - 1e-9 and c.end <= e.end + 1e-9)
            spent[e] = max(0.0, e.duration - inside) + after.get(e.action, 0.0)
            by[e.action.op][e.action.stage].append(spent[e])
            end[e.action] = e.end
        for r in range(trace.p):
            for c in talks[r]:
                if c.kind.startswith("tp"):
                    obs.append((ring_steps(_kind(c.kind), mesh.tp), c.nbytes, c.end - c.start, "tp"))
            dp = sorted((c for c in talks[r] if c.kind == "dp all-reduce"), key=lambda c: c.start)
            if dp and trace.rank_events(r):
                last = trace.rank_events(r)[-1]
                tails.append((last, spent[last], dp))
        for w in trace.waits:
            if w.kind == "recv" and w.action in end and w.start <= end[w.action]:
                obs.append((1, nbytes[boundary(w.action)], w.end - end[w.action], "message"))
    f, b, wgt = [], [], []
    for s in range(schedule.n_stages):
        f.append(_median(by["F"][s]))
        b.append(_median(by["B"][s]) if by["B"][s] else _median(by["I"][s]) + _median(by["W"][s]))
        wgt.append(min(b[-1], _median(by["W"][s])) if by["W"][s] else b[-1] / 2)
    for last, spent_on_it, dp in tails:
        # The step pays for the gradient all-reduces from where the rank's last action would have
        # ended at its typical length: buckets launched during it slow it down (they share the
        # cores), and that is their cost too. Then one bucket at a time, as the simulator sends them.
        typical = _median(by[last.action.op][last.action.stage])
        done = last.end - max(0.0, spent_on_it - typical)
        prev = done
        for c in dp:
            if c.end > done:
                obs.append((ring_steps("all-reduce", mesh.dp), c.nbytes, c.end - max(c.start, prev), "dp"))
            prev = max(prev, c.end)
    link = fit_link([(s, x, t) for s, x, t, _ in obs if t > 0])
    counts = {k: sum(1 for *_, what in obs if what == k) for k in ("tp", "dp", "message")}
    costs = Costs(forward=f, backward=b, weight=wgt, activation_bytes=nbytes,
                  latency=link.latency, bandwidth=link.bandwidth)
    return Calibration(costs, Network.uniform(link), Traffic.of_plan(plan), counts)


def _overheads(trace: Trace) -> dict:
    """What a measured rank spends between one action and the next that is neither compute nor a
    recorded wait: posting the action's sends, taking inputs that had already arrived, the
    executor's own bookkeeping. It belongs to the action before it (a simulated trace has none:
    there, every gap is a wait)."""
    if trace.source != "measured":
        return {}
    out = {}
    for r in range(trace.p):
        mine = trace.rank_events(r)
        waits = [(w.start, w.end) for w in trace.waits if w.rank == r]
        for e, nxt in zip(mine, mine[1:]):
            out[e.action] = max(0.0, nxt.start - e.end - covered(e.end, nxt.start, waits))
    return out


def fit_link(observations: Sequence[tuple[float, float, float]]) -> Link:
    """latency L >= 0 and bandwidth B > 0 that best explain timings t ≈ steps·L + bytes/B, by
    least squares: the fitted times add up to the measured ones, which is what a step's time is
    made of (a collective on gloo includes waiting for a late peer, so its times spread wide and
    their mean, not their median, is what the step pays). No timings: a free link."""
    rows = [(s, x, t) for s, x, t in observations if t > 0]
    if not rows:
        return Link(float("inf"), 0.0)
    saa = sum(a * a for a, _, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    sat = sum(a * t for a, _, t in rows)
    sbt = sum(b * t for _, b, t in rows)
    det = saa * sbb - sab * sab
    lat, inv = -1.0, -1.0
    if det > 1e-9 * saa * sbb:
        lat, inv = (sat * sbb - sbt * sab) / det, (sbt * saa - sat * sab) / det
    if lat < 0 or inv < 0:       # one of the two alone explains the timings best (or only one can)
        fits = []
        if sbb > 0:
            x = sbt / sbb
            fits.append((sum((t - b * x) ** 2 for _, b, t in rows), 0.0, x))
        if saa > 0:
            y = sat / saa
            fits.append((sum((t - a * y) ** 2 for a, _, t in rows), y, 0.0))
        _, lat, inv = min(fits)
    return Link(1.0 / inv if inv > 0 else float("inf"), max(0.0, lat))


def predicted_vs_measured(result) -> dict:
    """Calibrate on a measured run, simulate it, and compare step times (ms, medians over the
    traced steps after the first, which warms up; the step: first action or collective to the
    last one's end, as step_time).
    Returns predicted_ms, measured_ms, error (predicted / measured − 1), the calibration, the
    simulated Trace, and the measured per-step times."""
    steady = result.traces[1:] or result.traces       # the first step warms up (allocations, caches)
    cal = calibrate_run(result, steady)
    plan = result.plan
    trace = simulate_mesh(plan.schedule, cal.costs, plan.mesh, cal.network, cal.traffic)
    measured = [step_time(t) for t in steady]
    predicted, median = step_time(trace), statistics.median(measured)
    return {"predicted_ms": predicted, "measured_ms": median, "error": predicted / median - 1,
            "measured_steps_ms": measured, "calibration": cal, "trace": trace}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0
