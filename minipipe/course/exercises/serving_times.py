"""Exercise 14's times on other models of a stream: the serving simulator's done times (the right
ones), replays of the same pipeline with one thing changed (the arrivals, the messages, the stages),
and the hint that names which change a learner's wrong done times match."""

from __future__ import annotations

from ...schedule.kinds import make_schedule
from ...schedule.replay import replay
from ...sim.request_stream import ServeCosts, Stream, simulate_serving
from ..i18n.messages import say as _
from .verdict import close


def simulated(stream: Stream, stage_ms: list[float], latency: float) -> list[float]:
    whole = sum(stage_ms)
    costs = ServeCosts(per_request=0.0, fixed=whole, latency=latency, stage_share=tuple(x / whole for x in stage_ms))
    return simulate_serving(stream, costs, p=len(stage_ms)).done_ms


def _replayed(stream: Stream, ready: list[float], stage_ms: list[float], latency: float) -> list[float]:
    """Done times on another model of the stream (for naming a mistake): micro-batches released
    at `ready`, stages `stage_ms`."""
    s = make_schedule("inference", len(stage_ms), len(ready))
    times = replay(
        s,
        lambda r, a: stage_ms[a.stage],
        (lambda d, src, dst: latency) if latency else None,
        release=lambda a: ready[a.mb] if a.stage == 0 else 0.0,
    )
    done = {a.mb: end for a, (_start, end) in zip(s.actions[-1], times[-1])}
    return [done[stream.microbatch_of(i)] for i in range(stream.requests)]


def stream_hint(stream, stage_ms, latency, mine, arrivals) -> str:
    p, ready = len(stage_ms), stream.ready_ms()
    firsts = [arrivals[stream.members(mb)[0]] for mb in range(stream.n_microbatches)]
    serial_stage = [sum(stage_ms) + (p - 1) * latency]
    variants = [  # (done times on another model, what it is, whether it differs only when messages cost)
        (
            [d - a for d, a in zip(simulated(stream, stage_ms, latency), arrivals)],
            _(
                "Those are the requests' latencies (done − arrival); return when each is done, in ms from the stream's "
                "start."
            ),
            False,
        ),
        (
            _replayed(stream, [0.0] * len(ready), stage_ms, latency),
            _(
                "That would be right if every request were there at time 0: a micro-batch enters stage 0 only once its "
                "last request has arrived (and stage 0 is free)."
            ),
            False,
        ),
        (
            _replayed(stream, firsts, stage_ms, latency),
            _("That starts a micro-batch when its first request arrives; it is complete only when its last one has."),
            False,
        ),
        (
            _replayed(stream, ready, stage_ms, 0.0),
            _(
                "That leaves out the messages: a micro-batch's activation takes {latency:g} ms to cross each of the "
                "p − 1 = {gaps} boundaries between ranks on its way.",
                latency=latency,
                gaps=p - 1,
            ),
            True,
        ),
        (
            _replayed(stream, [r + latency for r in ready], stage_ms, latency),
            _(
                "That counts one message too many: a micro-batch crosses p − 1 = {gaps} boundaries between ranks, "
                "none before the first stage.",
                gaps=p - 1,
            ),
            True,
        ),
        (
            _replayed(stream, ready, stage_ms, 2 * latency),
            _("That counts each message twice: serving sends activations forward only, no gradient comes back."),
            True,
        ),
        (
            _replayed(stream, ready, serial_stage, 0.0),
            _(
                "That runs one micro-batch at a time through the whole pipeline. A pipeline works on several at once: "
                "stage 0 takes the next micro-batch as soon as it has handed the last one on."
            ),
            False,
        ),
    ]
    right = simulated(stream, stage_ms, latency)
    for other, hint, needs_latency in variants:
        if (
            (latency or not needs_latency)
            and all(close(x, y) for x, y in zip(mine, other))
            and not all(close(x, y) for x, y in zip(other, right))
        ):
            return " " + hint
    return ""
