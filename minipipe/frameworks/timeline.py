"""Another engine's timings as minipipe Traces, so that one plot shows both engines.

Each rank of a framework's run records, per step, (action, start, end) for every forward and
backward it ran, in its text form ("1F3") and in `time.perf_counter()` seconds: one clock for
every process on a machine (CLOCK_MONOTONIC on Linux), so no offsets are needed. `time_calls`
records them around torch's pipeline stages (torch's runtime here, `minipipe bench`'s yardstick).
"""

from __future__ import annotations

from ..schedule.ir import Schedule
from ..schedule.ops import Action
from ..trace import Event, Trace


def traces_from_events(
    schedule: Schedule, per_rank: list[list[list[tuple[str, float, float]]]], engine: str
) -> list[Trace]:
    """One measured Trace per step from `per_rank[rank][step]` = [(action, start, end), ...];
    times become milliseconds from the step's first start. `engine` names who ran it."""
    steps = min(len(events) for events in per_rank)
    traces = []
    for step in range(steps):
        rows = [(r, Action.parse(a), t0, t1) for r, events in enumerate(per_rank) for a, t0, t1 in events[step]]
        zero = min(t0 for _, _, t0, _ in rows)
        traces.append(
            Trace(
                schedule,
                [Event(r, a, 1000 * (t0 - zero), 1000 * (t1 - zero)) for r, a, t0, t1 in rows],
                source="measured",
                step=step,
                meta={"engine": engine},
            )
        )
    return traces


def order_of(trace: Trace) -> list[list[str]]:
    """The actions each rank ran, in the order it ran them."""
    return [[str(e.action) for e in trace.rank_events(r)] for r in range(trace.p)]


def planned(schedule: Schedule) -> list[list[str]]:
    """The schedule's computations, per rank, as text (what a framework's run times: its sends,
    receives and FSDP actions are not timed)."""
    return [[str(a) for a in row] for row in schedule.computations]


def time_calls(stage, record: list, clock) -> None:
    """Record (action, start, end) of every forward and backward torch's schedule runs on
    `stage`: the compute only (its sends and receives are posted outside these calls). A backward
    called with full_backward=False is the input-gradient half (I) of a split backward, and
    backward_weight_one_chunk its weight half (W): torch's runtime runs them for zero-bubble
    schedules."""
    for name, op in (("forward_one_chunk", "F"), ("backward_one_chunk", "B"), ("backward_weight_one_chunk", "W")):
        inner = getattr(stage, name)

        def timed(chunk, *args, _inner=inner, _op=op, **kwargs):
            start = clock()
            out = _inner(chunk, *args, **kwargs)
            label = "I" if _op == "B" and kwargs.get("full_backward") is False else _op
            record.append((f"{stage.stage_index}{label}{chunk}", start, clock()))
            return out

        setattr(stage, name, timed)
