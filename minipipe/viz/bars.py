"""The bars a timeline is made of, as plotly traces of plain dicts: one bar per executed action,
marks for the written sends, receives and FSDP actions, strips for the collectives and the waits.

Each reads only a Trace, so a simulated step and a measured one are drawn by the same code. Ranks
are rows (rank 0 on top), time runs from the step's first action, and an action's bar shows:

    colour   the op: F forward, B backward, I input gradient, W weight gradient (schedule/ops.py; Okabe-Ito,
             colour-blind safe)
    pattern  the chunk, for interleaved schedules (chunk 0 plain, chunk 1 hatched, ...)
    label    the micro-batch number
    hover    the action (`2F5`), its rank and stage, start, end and duration

A schedule that writes torch's sends, receives and FSDP actions (schedule/ops.py) has them drawn as marks
at their time along the top of their rank's row (▶ send, ◀ receive, ◆ unshard, ◇ reshard, ★ reduce
the gradients), one legend entry per kind: on the cost model they take no time of their own.

A measured (or mesh-simulated) trace may also carry collectives: tensor-parallel all-reduces and
all-gathers inside the actions, data-parallel gradient all-reduces over the cool-down. Each is a
thin strip along the bottom of its rank's row, in its kind's colour (traffic.py: none an op
uses), one legend entry per kind. Measured waits on communication are faint, thinner bars.

The traces are plain dicts, handed to plotly unvalidated: plotly's per-element validation costs
~10x the rest for a thousand bars, and the explorer widget redraws on every slider move.
tests/viz/test_viz_timeline.py re-validates every figure kind. The figures that lay them out are
timeline.py's (the timeline, its animation, the comparison), cap_explorer.py's and widgets.py's.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..schedule.ops import ALL_OPS, OPS
from ..trace import Trace
from ..traffic import KINDS
from .style import INK

OP_COLOR = {code: op.colour for code, op in OPS.items()}  # F blue, B orange, I vermillion, W green
OP_INK = {code: op.ink for code, op in OPS.items()}  # label colour readable on each fill
OP_NAME = {code: op.name for code, op in OPS.items()}
MARK_SYMBOL = {
    "SEND_F": "triangle-right",
    "SEND_B": "triangle-right",
    "RECV_F": "triangle-left",
    "RECV_B": "triangle-left",
    "UNSHARD": "diamond",
    "RESHARD": "diamond-open",
    "REDUCE_GRAD": "star",
}
CHUNK_PATTERN = ("", "/", ".", "x", "\\", "+", "-", "|")  # chunk 0 plain, then hatches
WAIT_COLOR = "rgba(128,128,128,0.45)"


def chunk_of(trace: Trace) -> dict[int, int]:
    """Stage -> its chunk index on its rank (0 for the rank's first stage, 1 for the next, ...).
    With the usual round-robin placement this is stage // p."""
    return {s: i for r in range(trace.p) for i, s in enumerate(trace.schedule.stages_of(r))}


def groups(trace: Trace) -> list[tuple[str, int]]:
    """The (op, chunk) pairs that appear, in a fixed order: one bar trace (and legend entry) each."""
    chunks = chunk_of(trace)
    present = {(e.action.op, chunks.get(e.action.stage, 0)) for e in trace.events if e.action.op in OPS}
    return sorted(present, key=lambda g: (list(OPS).index(g[0]), g[1]))


def group_name(op: str, chunk: int, v: int) -> str:
    return f"{op} {OP_NAME[op]}" + (f" · chunk {chunk}" if v > 1 else "")


def action_bars(
    trace: Trace,
    *,
    slots: Iterable[tuple[str, int]] | None = None,
    now: float | None = None,
    xaxis: str = "x",
    yaxis: str = "y",
) -> list[dict]:
    """One bar trace per (op, chunk) group, each bar one event, in trace order.

    slots: the groups to emit, in order (default: those present). A slot with no events is
        emitted empty and invisible: the explorer keeps a fixed set of traces and restyles them.
    now: draw each bar only up to this time (from the step's start); bars not yet started get
        no width (None). Every frame of the animation then has the same bars, only their widths change.
    """
    t0, v, chunks = trace.start, trace.schedule.v, chunk_of(trace)
    slots = list(slots) if slots is not None else groups(trace)
    rows: dict[tuple[str, int], list] = {g: [] for g in slots}
    for e in trace.events:
        rows.setdefault((e.action.op, chunks.get(e.action.stage, 0)), []).append(e)
    bars = []
    for op, chunk in slots:
        events = rows[(op, chunk)]
        starts = [e.start - t0 for e in events]
        ends = [e.end - t0 for e in events]
        bars.append(
            dict(
                type="bar",
                orientation="h",
                base=starts,
                x=widths(starts, ends, now),
                y=[e.rank for e in events],
                ids=[f"{e.rank}:{e.action}" for e in events],
                width=0.8,
                text=[str(e.action.mb) for e in events],
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                textfont=dict(color=OP_INK[op]),
                hovertext=[
                    f"<b>{e.action}</b>  rank {e.rank} · stage {e.action.stage} · micro-batch {e.action.mb}"
                    f"<br>start {a:.3f}  end {b:.3f}  duration {b - a:.3f} {trace.unit}"
                    for e, a, b in zip(events, starts, ends)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                marker=dict(
                    color=OP_COLOR[op],
                    line=dict(width=0.5, color="rgba(0,0,0,0.35)"),
                    pattern=dict(
                        shape=CHUNK_PATTERN[chunk % len(CHUNK_PATTERN)],
                        fillmode="overlay",
                        fgcolor=OP_INK[op],
                        fgopacity=0.45,
                        size=7,
                        solidity=0.25,
                    ),
                ),
                name=group_name(op, chunk, v),
                legendgroup=f"{op}{chunk}",
                visible=bool(events),
                meta=dict(kind="action", op=op, chunk=chunk),
                xaxis=xaxis,
                yaxis=yaxis,
            )
        )
    return bars


def action_marks(trace: Trace, *, xaxis: str = "x", yaxis: str = "y") -> list[dict]:
    """The schedule's written sends, receives and FSDP actions: one scatter trace of marks per op,
    each at its action's start, along the top of its rank's row. Nothing for a trace without them."""
    t0, by_op = trace.start, {}
    for e in trace.events:
        if e.action.op not in OPS:
            by_op.setdefault(e.action.op, []).append(e)
    marks = []
    for op in (op for op in ALL_OPS if op in by_op):
        events = by_op[op]
        marks.append(
            dict(
                type="scatter",
                mode="markers",
                x=[e.start - t0 for e in events],
                y=[e.rank - 0.3 for e in events],
                marker=dict(symbol=MARK_SYMBOL[op], size=9, color=ALL_OPS[op].colour, line=dict(width=1, color=INK)),
                hovertext=[
                    f"<b>{e.action}</b>  rank {e.rank} · {ALL_OPS[op].name}<br>at {e.start - t0:.3f} {trace.unit}"
                    for e in events
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                name=f"{op} {ALL_OPS[op].name}",
                legendgroup=f"mark {op}",
                meta=dict(kind="mark", op=str(op)),
                xaxis=xaxis,
                yaxis=yaxis,
            )
        )
    return marks


def widths(starts: list[float], ends: list[float], now: float | None) -> list[float | None]:
    """Bar lengths, cut at `now`. A bar that has not started is None, not 0: plotly then draws
    nothing for it, where a zero-width bar would still show its outline."""
    if now is None:
        return [b - a for a, b in zip(starts, ends)]
    return [min(b, now) - a if a < now else None for a, b in zip(starts, ends)]


def wait_bars(
    trace: Trace, *, now: float | None = None, visible: bool = True, xaxis: str = "x", yaxis: str = "y"
) -> list[dict]:
    """Measured time blocked on communication, drawn faint and thin behind the actions (one
    trace; its legend entry hides and shows it). Nothing for a trace without waits."""
    if not trace.waits:
        return []
    t0 = trace.start
    starts = [w.start - t0 for w in trace.waits]
    ends = [w.end - t0 for w in trace.waits]
    return [
        dict(
            type="bar",
            orientation="h",
            base=starts,
            x=widths(starts, ends, now),
            y=[w.rank for w in trace.waits],
            width=0.4,
            marker=dict(color=WAIT_COLOR, line=dict(width=0)),
            name="comm wait",
            hovertext=[f"wait: {w.what}<br>{b - a:.3f} {trace.unit}" for w, a, b in zip(trace.waits, starts, ends)],
            hovertemplate="%{hovertext}<extra></extra>",
            visible=True if visible else "legendonly",
            legendgroup="wait",
            meta=dict(kind="wait"),
            xaxis=xaxis,
            yaxis=yaxis,
        )
    ]


def collective_bars(trace: Trace, *, now: float | None = None, xaxis: str = "x", yaxis: str = "y") -> list[dict]:
    """The collectives each rank took part in, from start until found complete: one bar trace per
    kind (tp all-reduce, tp all-gather, cp ring, dp all-reduce), each bar a thin strip along the bottom of
    its rank's row, over the action it ran in. Nothing for a trace without collectives."""
    t0, kinds = trace.start, {}
    for c in trace.collectives:
        kinds.setdefault(c.kind, []).append(c)
    bars = []
    for kind in (k for k in KINDS if k in kinds):
        talks = kinds[kind]
        starts = [c.start - t0 for c in talks]
        ends = [c.end - t0 for c in talks]
        bars.append(
            dict(
                type="bar",
                orientation="h",
                base=starts,
                x=widths(starts, ends, now),
                y=[c.rank for c in talks],
                width=0.16,
                offset=0.24,
                name=str(kind),
                legendgroup=f"collective {kind}",
                marker=dict(color=kind.colour, line=dict(width=0.5, color="rgba(0,0,0,0.5)")),
                hovertext=[
                    f"<b>{kind}</b>  rank {c.rank} · {c.nbytes:,.0f} bytes sent<br>start {a:.3f}  end {b:.3f}  "
                    f"duration {b - a:.3f} {trace.unit}"
                    for c, a, b in zip(talks, starts, ends)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                meta=dict(kind="collective", collective=str(kind)),
                xaxis=xaxis,
                yaxis=yaxis,
            )
        )
    return bars
