"""Every registered schedule on one model, simulated side by side: step time, bubble and peak memory.

    from minipipe.sim.survey import survey, table
    rows = survey(p=4, m=8, costs=Costs(forward=1, backward=2, weight=1))
    print(table(rows))

Memory is counted in micro-batches of a rank's whole share of the model: a chunk of a kind with v
chunks per rank holds 1/v of that, so ZB-V's 2p chunks are the p micro-batches 1F1B's first rank
holds. Kinds whose rules exclude (p, m) are listed with the reason, not dropped in silence. The
kinds without a flush (PipeDream, PipeDream-2BW) overlap their steps: a run of their default steps
is simulated and its time given per step, with a note that their math is not the others'. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule import kinds
from .costs import Costs
from .pipeline import simulate


@dataclass(frozen=True)
class Row:
    kind: str
    v: int
    makespan: float | None  # the step, in the costs' unit
    bubble: float | None  # idle share of all ranks' time (Trace.bubble)
    idle: float | None  # the most idle rank's idle time
    peak: float | None  # most micro-batches (of a rank's whole share) a rank holds at once
    time_vs_1f1b: float | None  # makespan / 1F1B's
    memory_vs_1f1b: float | None  # peak / 1F1B's
    note: str = ""  # why a kind is not simulated here


def survey(p: int, m: int, costs: Costs | None = None, names: list[str] | None = None) -> list[Row]:
    """Simulate each training kind (all registered ones by default) at (p, m) under `costs`."""
    costs = costs or Costs()
    measured: dict[str, tuple[int, float, float, float, float] | str] = {}
    for name in names or kinds.names():
        try:
            schedule = kinds.make_schedule(name, p, m)
        except ValueError as e:
            measured[name] = str(e)
            continue
        if schedule.forward_only:
            continue
        trace = simulate(schedule, costs)
        steps = schedule.steps  # > 1: no flush, a run whose steps overlap
        measured[name] = (
            schedule.v,
            trace.makespan / steps,
            trace.bubble(),
            max(trace.idle(r) for r in range(p)) / steps,
            max(trace.peak_inflight()) / schedule.v,
        )
    one_f_one_b = simulate(kinds.make_schedule("1f1b", p, m), costs)  # the baseline, surveyed or not
    base_span, base_peak = one_f_one_b.makespan, max(one_f_one_b.peak_inflight())
    rows = []
    for name, got in measured.items():
        if isinstance(got, str):
            rows.append(Row(name, kinds.get(name).default_v, None, None, None, None, None, None, got))
        else:
            v, span, bubble, idle, peak = got
            k = kinds.get(name)
            note = (
                ""
                if k.asynchronous is None
                else f"per step of {k.asynchronous.default_steps} without a flush; not the unsplit model's math"
            )
            rows.append(Row(name, v, span, bubble, idle, peak, span / base_span, peak / base_peak, note))
    return rows


def table(rows: list[Row]) -> str:
    """The survey as text: one line per kind."""
    lines = [f"{'kind':<14}{'v':>3}{'step':>9}{'bubble':>8}{'idle':>8}{'peak':>7}{'step/1f1b':>11}{'peak/1f1b':>11}"]
    for r in rows:
        if r.makespan is None:
            lines.append(f"{r.kind:<14}{r.v:>3}   not here: {r.note}")
            continue
        lines.append(
            f"{r.kind:<14}{r.v:>3}{r.makespan:>9.2f}{r.bubble:>8.1%}{r.idle:>8.2f}{r.peak:>7.1f}"
            f"{r.time_vs_1f1b:>11.3f}{r.memory_vs_1f1b:>11.2f}" + (f"   ({r.note})" if r.note else "")
        )
    return "\n".join(lines)
