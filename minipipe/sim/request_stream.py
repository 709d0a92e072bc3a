"""Serving on the cost model: a stream of requests through a forward-only pipeline, simulated.

    from minipipe.sim.request_stream import Stream, ServeCosts, simulate_serving
    stream = Stream(requests=64, microbatch=4, rate=500)          # 500 requests per second
    result = simulate_serving(stream, ServeCosts(per_request=0.5, fixed=1.0), p=2)
    result.p50, result.p99, result.throughput                   # ms, ms, requests per second

Requests arrive all at once (rate=None) or at a rate; requests 0..k-1 make micro-batch 0, the
next k micro-batch 1, and so on. A micro-batch is ready when its last request has arrived, and
enters stage 0 as soon as it is ready and stage 0 is free; then it walks through every stage
in order (the "inference" schedule, schedule/kinds.py). Each request's latency is the time from its
arrival to the end of its micro-batch's forward on the last stage.

Two things pull against each other as the micro-batch size k grows: a bigger micro-batch
spreads each stage's fixed cost over more requests (throughput up), but its requests wait
for each other to arrive and are computed together (latency up). And a pipeline of p stages
serves up to p micro-batches at once (throughput up to p times), while one request still walks
through all p stages plus the messages between them: its latency does not shrink.

The measured run (serve/api.py) returns the same `StreamResult`, with a measured Trace, so the
two are drawn by the same figures (viz/latency_throughput.py). Nothing here needs torch.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schedule.kinds import make_schedule
from ..schedule.replay import replay
from ..trace import Event, Trace, covered
from .costs import Costs
from .measured_costs import calibrate, median

ARRIVALS = ("even", "poisson")


def _whole(name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class Stream:
    """Requests arriving at a pipeline, and how they are grouped.

    requests: how many.
    microbatch: requests per micro-batch (k). The last micro-batch may hold fewer; the measured
        run pads it to k rows (every message keeps one shape), so it costs what a full one does.
    rate: arrivals per second; None: all at once, at time 0.
    arrivals: "even" (one every 1/rate s) or "poisson" (random gaps averaging 1/rate s, from `seed`).
    """

    requests: int = 32
    microbatch: int = 4
    rate: float | None = None
    arrivals: str = "even"
    seed: int = 0

    def __post_init__(self) -> None:
        _whole("requests", self.requests)
        _whole("microbatch (requests per micro-batch)", self.microbatch)
        if self.rate is not None and (
            isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not 0 < self.rate < math.inf
        ):
            raise ValueError(
                f"rate is requests per second and must be > 0 (or None: all arrive at once), got {self.rate!r}"
            )
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"unknown arrivals {self.arrivals!r}; choose one of {', '.join(ARRIVALS)}")
        if self.arrivals == "poisson" and self.rate is None:
            raise ValueError(
                "poisson arrivals need a rate: give --rate (rate=, requests per second); without one "
                "every request arrives at once"
            )

    @property
    def n_microbatches(self) -> int:
        return -(-self.requests // self.microbatch)

    def arrival_ms(self) -> list[float]:
        """When each request arrives, in ms from the stream's start."""
        if self.rate is None:
            return [0.0] * self.requests
        gap = 1000.0 / self.rate
        if self.arrivals == "even":
            return [i * gap for i in range(self.requests)]
        draw, t, out = random.Random(self.seed), 0.0, []
        for _ in range(self.requests):
            out.append(t)
            t += draw.expovariate(1.0) * gap
        return out

    def microbatch_of(self, request: int) -> int:
        return request // self.microbatch

    def members(self, mb: int) -> range:
        """The requests of micro-batch `mb`."""
        return range(mb * self.microbatch, min((mb + 1) * self.microbatch, self.requests))

    def ready_ms(self) -> list[float]:
        """When each micro-batch is complete: its last request's arrival."""
        arrivals = self.arrival_ms()
        return [arrivals[self.members(mb)[-1]] for mb in range(self.n_microbatches)]


@dataclass(frozen=True)
class ServeCosts:
    """What the simulated stream costs, in ms. One micro-batch of k requests through the whole
    model takes fixed + per_request·k, split over the p·v stages evenly (the same model whatever
    p, so layouts compare fairly) or by `stage_share` (each stage's fraction of it, as measured
    on one layout: `fit` sets it, `even()` drops it to sweep other layouts); each message between
    ranks takes `latency`. `fit` reads them all off measured runs."""

    per_request: float = 1.0
    fixed: float = 0.0
    latency: float = 0.0
    stage_share: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("per_request", "fixed", "latency"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise ValueError(f"{name} must be a time in ms >= 0, got {value!r}")
        if self.stage_share is not None and (
            not self.stage_share
            or any(not x >= 0 for x in self.stage_share)
            or not math.isclose(sum(self.stage_share), 1.0, rel_tol=1e-6)
        ):
            raise ValueError(
                f"stage_share gives each stage's fraction of the model: numbers >= 0 that sum to 1; "
                f"got {self.stage_share}"
            )

    def even(self) -> ServeCosts:
        """The same costs split evenly over the stages, for any number of them."""
        return dataclasses.replace(self, stage_share=None)

    def stage_ms(self, k: int, n_stages: int) -> list[float]:
        """Each of `n_stages` stages' time for a micro-batch of k requests."""
        whole = self.microbatch_ms(k)
        if self.stage_share is None:
            return [whole / n_stages] * n_stages
        if len(self.stage_share) != n_stages:
            raise ValueError(
                f"stage_share has {len(self.stage_share)} stages but the pipeline has {n_stages}; "
                f"fit the costs on a run of the same p·v, or use costs.even()"
            )
        return [whole * x for x in self.stage_share]

    def microbatch_ms(self, k: int) -> float:
        """One micro-batch of k requests through the whole model."""
        return self.fixed + self.per_request * k

    @staticmethod
    def fit(results: StreamResult | Sequence[StreamResult]) -> ServeCosts:
        """Costs from measured runs: each run's whole-model time per micro-batch (the sum over its
        stages of their mean time, `stage_times`) against its micro-batch size k, fitted as
        fixed + per_request·k by least squares (runs of one k only: fixed = 0); latency, the median
        delivery of a message that was already awaited (calibrate.calibrate's); stage_share, each
        stage's mean share of the whole (when every run has the same number of stages)."""
        results = [results] if isinstance(results, StreamResult) else list(results)
        if not results or any(r.source != "measured" for r in results):
            raise ValueError("ServeCosts.fit needs measured runs (from minipipe.serve.api.serve)")
        points: list[tuple[int, float]] = []
        shares: list[list[float] | None] = []
        for r in results:
            stage = stage_times(r)
            points.append((r.stream.microbatch, sum(stage)))
            shares.append([x / sum(stage) for x in stage] if sum(stage) > 0 else None)
        ks = {k for k, _ in points}
        if len(ks) == 1:
            fixed, per = 0.0, statistics.mean(t for _, t in points) / ks.pop()
        else:
            per, fixed = statistics.linear_regression([k for k, _ in points], [t for _, t in points])
            if fixed < 0:  # the line crosses below zero: a fixed cost too small to tell from noise
                fixed, per = 0.0, sum(t for _, t in points) / sum(k for k, _ in points)
        latency = median(calibrate(r.trace).latency for r in results)
        whole = [x for x in shares if x is not None]
        same = len(whole) == len(shares) and len({len(x) for x in whole}) == 1
        share = tuple(statistics.mean(col) for col in zip(*whole)) if same else None  # rows of 1: their mean sums to 1
        return ServeCosts(per_request=max(per, 0.0), fixed=fixed, latency=latency, stage_share=share)


def stage_times(result: StreamResult) -> list[float]:
    """Each stage's mean time per micro-batch in a measured run: its forward, plus what its rank
    then spends neither computing nor waiting (for data, for its sends, for requests to arrive):
    handing the output on, posting receives, the executor's own steps. Left out, that overhead
    (~0.1 ms an action on a 2-core CPU machine) makes the model promise too much. The mean, not
    the median: a forward that the OS paused costs the stream its whole length. A rank's last
    forward has no such "after" and counts only when its stage has nothing else."""
    trace, ready = result.trace, result.stream.ready_ms()
    full: dict[int, list[float]] = {}
    last: dict[int, list[float]] = {}
    for q in range(trace.p):
        events = trace.rank_events(q)
        waits = sorted((w.start, w.end) for w in trace.waits if w.rank == q)  # one at a time: they don't overlap
        starts = [a for a, _ in waits]
        for e, after in zip(events, events[1:]):
            j = bisect.bisect_left(starts, after.start)
            spans = []
            while j > 0 and waits[j - 1][1] > e.end:  # the waits inside this gap, latest first
                spans.append(waits[j - 1])
                j -= 1
            if after.action.stage == 0 and after.action.mb is not None:  # stage 0 idles until its requests arrive
                spans.append((e.end, ready[after.action.mb]))
            extra = max(0.0, after.start - e.end - covered(e.end, after.start, spans))
            full.setdefault(e.action.stage, []).append(e.duration + extra)
        if events:
            last.setdefault(events[-1].action.stage, []).append(events[-1].duration)
    return [statistics.mean(full.get(s) or last[s]) for s in sorted(set(full) | set(last))]


@dataclass
class StreamResult:
    """A stream served, simulated or measured: when each request arrived and got its result,
    and the timeline (a Trace of the inference schedule, ms from the stream's start)."""

    stream: Stream
    trace: Trace
    arrival_ms: list[float]  # per request
    done_ms: list[float]  # per request: its micro-batch's forward ended on the last stage
    p: int = 1
    v: int = 1
    tp: int = 1
    outputs: Any = None  # measured: the model's output for every request, in order
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.trace.source

    @property
    def label(self) -> str:
        """For legends: '1 process', 'pipeline p=2', 'tensor tp=2', 'pipeline p=2 × tensor tp=2'."""
        parts = ([f"pipeline p={self.p}" + (f" v={self.v}" if self.v > 1 else "")] if self.p > 1 else []) + (
            [f"tensor tp={self.tp}"] if self.tp > 1 else []
        )
        return " × ".join(parts) or "1 process"

    @property
    def latency_ms(self) -> list[float]:
        return [d - a for a, d in zip(self.arrival_ms, self.done_ms)]

    def percentile(self, q: float) -> float:
        """The q-th percentile of the requests' latencies, ms (linear between ranks, as numpy's)."""
        xs = sorted(self.latency_ms)
        at = (len(xs) - 1) * q / 100
        lo = math.floor(at)
        return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p95(self) -> float:
        return self.percentile(95)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    @property
    def span_ms(self) -> float:
        """First arrival to last result."""
        return max(self.done_ms) - min(self.arrival_ms)

    @property
    def throughput(self) -> float:
        """Requests served per second, over the span from the first arrival to the last result."""
        return 1000.0 * len(self.done_ms) / self.span_ms if self.span_ms > 0 else math.inf

    def compute_ms(self, request: int) -> float:
        """The compute request `request` went through: its micro-batch's forwards on every stage
        (from the trace), without the waits and messages between them."""
        mb = self.stream.microbatch_of(request)
        return sum(e.duration for e in self.trace.events if e.action.mb == mb)

    def predicted(self, costs: ServeCosts | None = None) -> StreamResult:
        """The same stream and layout on the cost model, with costs fitted on this run (a measured
        one) unless given: what the simulator says this run should have measured."""
        sim = simulate_serving(self.stream, costs or ServeCosts.fit(self), self.p, self.v, self.trace.schedule.kind)
        sim.tp = self.tp
        return sim

    def summary(self) -> str:
        s = self.stream
        rate = "all at once" if s.rate is None else f"{s.rate:g}/s ({s.arrivals})"
        return (
            f"{self.source} {self.label}: {s.requests} requests, {rate}, micro-batches of {s.microbatch}\n"
            f"  latency p50 {self.p50:.2f} ms  p95 {self.p95:.2f} ms  p99 {self.p99:.2f} ms   "
            f"throughput {self.throughput:,.0f} requests/s"
        )


def simulate_serving(
    stream: Stream, costs: ServeCosts | None = None, p: int = 1, v: int | None = None, kind: str = "inference"
) -> StreamResult:
    """The stream through p ranks (v stages each) on the cost model."""
    costs = costs or ServeCosts()
    if not isinstance(stream, Stream):
        raise ValueError(f"expected a Stream, got {type(stream).__name__}")
    schedule = make_schedule(kind, p, stream.n_microbatches, v)
    if not schedule.forward_only:
        raise ValueError(f"serving runs a forward-only schedule, and {schedule.kind} has a backward; use inference")
    each = costs.stage_ms(stream.microbatch, schedule.n_stages)
    ready = stream.ready_ms()
    times = replay(
        schedule,
        lambda rank, a: each[a.stage],
        (lambda d, src, dst: costs.latency) if costs.latency else None,
        release=lambda a: ready[a.mb] if a.stage == 0 and a.mb is not None else 0.0,
    )
    events = [
        Event(r, a, start, end)
        for r, (acts, row) in enumerate(zip(schedule.actions, times))
        for a, (start, end) in zip(acts, row)
    ]
    trace = Trace(
        schedule,
        events,
        costs=Costs(forward=each, backward=[0.0] * len(each), latency=costs.latency),  # weight: half the backward, 0
    )
    return result_of(stream, trace, p, schedule.v)


def result_of(
    stream: Stream, trace: Trace, p: int, v: int, tp: int = 1, outputs: Any = None, meta: dict[str, Any] | None = None
) -> StreamResult:
    """Each request's result time read off the trace: the end of its micro-batch's forward on the
    last stage."""
    last = trace.schedule.n_stages - 1
    done = {e.action.mb: e.end for e in trace.events if e.action.stage == last}
    return StreamResult(
        stream,
        trace,
        stream.arrival_ms(),
        [done[stream.microbatch_of(i)] for i in range(stream.requests)],
        p=p,
        v=v,
        tp=tp,
        outputs=outputs,
        meta=meta or {},
    )
