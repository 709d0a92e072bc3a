"""Costs read off measured Traces, for the pipeline simulator and the mesh simulator alike.

    calibrate(traces)                 pipeline.Costs: each stage's median F and B (or I and W) and a
                                      message's median delivery latency
    calibrate_mesh(traces, mesh, traffic, activation_bytes)
                                      a Calibration: compute per op with the tensor-parallel
                                      collectives taken out and the executor's time added, and one
                                      link fitted to what the run timed
    predicted_vs_measured(...)        calibrate on traces, simulate them, compare the step times

and the pieces every fit here shares, for whoever fits another model (the serving costs,
serving.ServeCosts.fit; the planner's efficiency): `median` (the one median: the middle value,
or the mean of the two middle ones), `stage_costs` (per-stage medians of F, B, I, W),
`compute_costs` (the mesh's compute alone), `deliveries` (messages whose receive was already
waiting) and `fit_link`.

Everything here reads Traces and what the caller says about the run (its mesh, the bytes its
shapes move: parallel/accounting.py reads those off a plan); no RunResult, no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..parallel.mesh import Mesh
from ..schedule.ops import Action, boundary
from ..trace import Event, Trace, Wait, covered
from ..traffic import Traffic, TrafficKind, ring_steps
from .costs import Costs
from .mesh_step import simulate_mesh, step_time
from .network import Link, Network

OPS_TIMED = ("F", "B", "I", "W")
# the talk fitted on a link of its own: ring attention's steps and the experts' all-to-alls each
# wait for their peers in the middle of the compute (calibrate_mesh)
OWN_LINK = ("cp", "ep")


def median(xs: Iterable[float]) -> float:
    """The median (the mean of the two middle values of an even count); 0.0 for none."""
    xs = list(xs)
    return statistics.median(xs) if xs else 0.0


def stage_costs(by: dict[str, list[list[float]]]) -> tuple[list[float], list[float], list[float]]:
    """(forward, backward, weight) per stage from each op's timings per stage (by[op][stage]):
    medians; a backward split into I and W costs their sum, and its weight part is W's (half
    the backward where no W was timed)."""
    f, b, w = [], [], []
    for s in range(len(by["F"])):
        f.append(median(by["F"][s]))
        b.append(median(by["B"][s]) if by["B"][s] else median(by["I"][s]) + median(by["W"][s]))
        w.append(min(b[-1], median(by["W"][s])) if by["W"][s] else b[-1] / 2)
    return f, b, w


def deliveries(trace: Trace) -> list[tuple[Wait, float]]:
    """Each message whose receive was already waiting when its producer ended, with how long it
    then took to arrive (from the producer's end to the end of the wait): what a message costs."""
    end = {e.action: e.end for e in trace.events}
    return [
        (w, w.end - end[w.action])
        for w in trace.waits
        if w.kind == "recv" and w.action in end and w.start <= end[w.action]
    ]


def calibrate(traces: Trace | Sequence[Trace]) -> Costs:
    """Costs read off measured traces (one step or several of the same schedule): each stage's
    median forward and backward time (a B, or an I and a W), its weight-gradient part, and the
    median delivery latency of a message (from the producer's end to the end of a receive that
    was already waiting)."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    n = traces[0].schedule.n_stages
    by: dict[str, list[list[float]]] = {op: [[] for _ in range(n)] for op in OPS_TIMED}
    for trace in traces:
        for e in trace.events:
            if e.action.op in by:  # the computations (a written send or receive is not timed)
                by[e.action.op][e.action.stage].append(e.duration)
    f, b, w = stage_costs(by)
    latency = median(delay for trace in traces for _, delay in deliveries(trace))
    return Costs(forward=f, backward=b, weight=w, latency=max(0.0, latency))


# -- the mesh: compute with its collectives, and a link ----------------------------------------
@dataclass
class Calibration:
    """Costs read off a measured run: compute per op (collectives taken out), one link fitted to
    what the run timed, and the run's traffic from its shapes."""

    costs: Costs
    network: Network
    traffic: Traffic
    observations: dict[str, int] = field(default_factory=dict)  # how many timings of each kind the link was fitted to


def compute_times(traces: Sequence[Trace]) -> tuple[dict[str, list[list[float]]], list[dict[Event, float]]]:
    """What each action of a measured run cost its rank: its duration with the tensor-parallel
    collectives, ring attention steps and the experts' all-to-alls inside it taken out (they are
    timed on their own), plus the executor's time after it (executor_overheads). Returns
    by[op][stage] (every step's timings) and, per trace, each
    event's figure."""
    n = traces[0].schedule.n_stages
    by: dict[str, list[list[float]]] = {op: [[] for _ in range(n)] for op in OPS_TIMED}
    spent = []
    for trace in traces:
        tp = [[c for c in trace.collectives if c.rank == r and c.kind.inside_actions] for r in range(trace.p)]
        after, mine = executor_overheads(trace), {}
        for e in trace.events:
            inside = sum(c.end - c.start for c in tp[e.rank] if c.start >= e.start - 1e-9 and c.end <= e.end + 1e-9)
            mine[e] = max(0.0, e.duration - inside) + after.get(e.action, 0.0)
            if e.action.op in by:
                by[e.action.op][e.action.stage].append(mine[e])
        spent.append(mine)
    return by, spent


def compute_costs(traces: Trace | Sequence[Trace]) -> Costs:
    """The mesh calibration's compute alone: each stage's median F, B (or I and W) as
    compute_times counts them. Free links, no bytes."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    f, b, w = stage_costs(compute_times(traces)[0])
    return Costs(forward=f, backward=b, weight=w)


def calibrate_mesh(
    traces: Trace | Sequence[Trace], mesh: Mesh, traffic: Traffic, activation_bytes: Sequence[float]
) -> Calibration:
    """Read a mesh simulation's costs off measured traces of one pipeline slice (`mesh`: the
    run's Mesh; `traffic`: its collectives from shapes, `activation_bytes`: per stage, one
    micro-batch's output; parallel/accounting.py's step_traffic and activation_bytes read both
    off a plan).

    compute: each stage's median F, B (or I and W) as compute_times counts them;
    link: latency and bandwidth fitted (least squares, both >= 0; see fit_link) to every
        timing that says what a transfer costs: each tensor-parallel collective (steps·latency +
        bytes sent / bandwidth), each ring attention step (latency + bytes / bandwidth), each
        gradient bucket's time after the rank's last action (a ring over the dp × cp ranks; one
        bucket at a time in the order the rank waited for them, which is the order of their ends:
        the dense buckets, then the experts' (an expert bucket launched first is found complete
        last: chained in launch order it carried the whole tail, which fitted the link at under
        half its speed and a DP4×EP2 step +27 % to +69 %); from the later of the previous
        bucket's end and where the last action would have ended at its typical length: a
        bucket launched during the backward slows it
        down, and gloo only notices its end when waited for, so what the step pays is the tail,
        which is also where the simulator puts a rank's buckets), each message whose receive was
        already waiting (latency + bytes / bandwidth); and the cp ring a link of its own, fitted to
        ring attention's steps alone (latency + bytes / bandwidth each): a step waits for the cp
        peer to reach it in the middle of its compute, which on shared cores is the peer's turn
        on a core more than bytes on a wire, and a gradient bucket in the step's tail, with the
        ranks already in line, pays none of it (one link for both put the ring's wait into every
        bucket: a CP4 step predicted 1.3 to 2.3 times its length under load). The experts'
        all-to-alls likewise get a link of their own, fitted to them alone (ep − 1 steps each).
    """
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    by, spent = compute_times(traces)
    nbytes = [float(x) for x in activation_bytes]
    obs: list[tuple[float, float, float, str]] = []  # (steps, bytes sent, seconds, what)
    tails = []  # (a rank's last event, its compute, its gradient all-reduces)
    for trace, mine in zip(traces, spent):
        for c in trace.collectives:
            if c.kind.axis == "tp":
                obs.append((ring_steps(c.kind, mesh.tp), c.nbytes, c.end - c.start, "tp"))
            elif c.kind is TrafficKind.CP_RING:  # one step: a message to the next rank
                obs.append((1, c.nbytes, c.end - c.start, "cp"))
            elif c.kind is TrafficKind.EP_ALL_TO_ALL:  # ep − 1 pairwise steps
                obs.append((ring_steps(c.kind, mesh.ep), c.nbytes, c.end - c.start, "ep"))
        for r in range(trace.p):
            dp = sorted(  # in the order the rank waited for them: a bucket ends when found complete
                (c for c in trace.collectives if c.rank == r and c.kind is TrafficKind.DP_ALL_REDUCE),
                key=lambda c: c.end,
            )
            if trace.rank_events(r):  # a rank without buckets adds no timing below
                last = trace.rank_events(r)[-1]
                tails.append((last, mine[last], dp))
        for w, delay in deliveries(trace):
            if w.action is not None:  # a receive's wait names what it waited for
                obs.append((1, nbytes[boundary(w.action)], delay, "message"))
    f, b, wgt = stage_costs(by)
    for last, spent_on_it, dp in tails:
        # The step pays for the gradient all-reduces from where the rank's last action would have
        # ended at its typical length: buckets launched during it slow it down (they share the
        # cores), and that is their cost too. Then one bucket at a time, as the simulator sends them.
        typical = median(by[last.action.op][last.action.stage])
        done = last.end - max(0.0, spent_on_it - typical)
        prev = done
        for c in dp:
            if c.end > done:
                obs.append((ring_steps(c.kind, mesh.size("dp_cp")), c.nbytes, c.end - max(c.start, prev), "dp"))
            prev = max(prev, c.end)
    link = fit_link([(s, x, t) for s, x, t, what in obs if t > 0 and what not in OWN_LINK])
    own = {
        axis: fit_link([(s, x, t) for s, x, t, what in obs if t > 0 and what == axis])
        for axis in OWN_LINK
        if any(what == axis for *_, what in obs)
    }
    counts = {k: sum(1 for *_, what in obs if what == k) for k in ("tp", "cp", "ep", "dp", "message")}
    costs = Costs(
        forward=f, backward=b, weight=wgt, activation_bytes=nbytes, latency=link.latency, bandwidth=link.bandwidth
    )
    return Calibration(costs, Network.uniform(link, own or None), traffic, counts)


def executor_overheads(trace: Trace) -> dict[Action, float]:
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
        return Link(math.inf, 0.0)
    saa = sum(a * a for a, _, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    sat = sum(a * t for a, _, t in rows)
    sbt = sum(b * t for _, b, t in rows)
    det = saa * sbb - sab * sab
    lat, inv = -1.0, -1.0
    if det > 1e-9 * saa * sbb:
        lat, inv = (sat * sbb - sbt * sab) / det, (sbt * saa - sat * sab) / det
    if lat < 0 or inv < 0:  # one of the two alone explains the timings best (or only one can)
        fits = []
        if sbb > 0:
            x = sbt / sbb
            fits.append((sum((t - b * x) ** 2 for _, b, t in rows), 0.0, x))
        if saa > 0:
            y = sat / saa
            fits.append((sum((t - a * y) ** 2 for a, _, t in rows), y, 0.0))
        _, lat, inv = min(fits)
    return Link(1.0 / inv if inv > 0 else math.inf, max(0.0, lat))


def predicted_vs_measured(
    traces: Sequence[Trace], mesh: Mesh, traffic: Traffic, activation_bytes: Sequence[float]
) -> dict[str, Any]:
    """Calibrate on measured traces of one pipeline slice (see calibrate_mesh for the other
    arguments), simulate the step, and compare step times (ms; the measured one the median over
    the traces; a step: first action or collective to the last one's end, as step_time). Give
    the steps after the first, which warms up (allocations, caches).
    Returns predicted_ms, measured_ms, error (predicted / measured − 1), the calibration, the
    simulated Trace, and the measured per-step times."""
    traces = list(traces)
    cal = calibrate_mesh(traces, mesh, traffic, activation_bytes)
    trace = simulate_mesh(traces[0].schedule, cal.costs, mesh, cal.network, cal.traffic)
    measured = [step_time(t) for t in traces]
    predicted, middle = step_time(trace), median(measured)
    return {
        "predicted_ms": predicted,
        "measured_ms": middle,
        "error": predicted / middle - 1,
        "measured_steps_ms": measured,
        "calibration": cal,
        "trace": trace,
    }
