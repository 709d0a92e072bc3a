"""Plotly pictures of a `Trace`: the timeline, its animation, the comparison of several.

Everything here reads only a Trace, so a simulated step and a measured one are drawn by the
same code. Ranks are rows (rank 0 on top), time runs left to right from the step's first action,
and every executed action is one horizontal bar (bars.py: colour the op, pattern the chunk, label
the micro-batch), with the written sends, receives and FSDP actions as marks and the collectives
and waits as strips. Idle time is left empty. The title gives the numbers: makespan, bubble (with
the textbook value) and peak in-flight micro-batches.

The look (palette, grey ink, transparent template) is style.py's; the memory view is inflight.py's.
Layouts are plain dicts handed to plotly unvalidated, as the bars are (bars.py says why).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..schedule import theory as textbook
from ..trace import Trace
from .bars import action_bars, action_marks, collective_bars, wait_bars, widths
from .style import INK, TEMPLATE, figure

ROW_PX, BASE_PX = 38, 150  # figure height = BASE_PX + ROW_PX per rank row


# -- the numbers a figure prints ------------------------------------------------------------
def extent(trace: Trace) -> float:
    """How far the picture runs from the step's start: the makespan (actions), or later where a
    collective (a gradient all-reduce after the last backward) ends after the last action."""
    return max([trace.makespan] + [c.end - trace.start for c in trace.collectives])


def theory_bubble(trace: Trace) -> float | None:
    """The textbook bubble for this trace's schedule, or None where no formula applies: a
    hand-written schedule or a kind without formulas, per-stage, scaled or latency costs, or a
    formula that does not hold for these numbers. A measured trace has no costs of its own, so it
    gets the textbook figure only where that does not depend on them (not zb-h1's)."""
    s, c = trace.schedule, trace.costs

    def bubble(f, b, w=None):  # a schedule of several steps (no flush, or steps=): the run's
        if s.updates is None:
            return textbook.bubble_fraction(s.kind, s.p, s.m, s.v, f, b, w)
        return textbook.run_bubble_fraction(s.kind, s.p, s.updates.per_step, s.steps, s.v, f, b, w)

    try:
        if c is None:
            figures = {round(bubble(f, b), 12) for f, b in ((1, 2), (1, 1))}
            return figures.pop() if len(figures) == 1 else None
        if (
            c.stage_scale
            or c.latency
            or not all(
                isinstance(x, (int, float)) for x in (c.forward, c.backward, 0.0 if c.weight is None else c.weight)
            )
        ):
            return None
        return bubble(c.forward, c.backward, c.weight)
    except ValueError:
        return None


def describe(trace: Trace, theory: float | bool | None = True) -> dict:
    """The numbers a figure prints: makespan, bubble, textbook bubble, peak in-flight."""
    expected = theory_bubble(trace) if theory is True else (theory or None)
    peaks = trace.peak_inflight() if trace.events else [0] * trace.p
    peak = max(peaks, default=0)
    return dict(
        makespan=trace.makespan,
        bubble=trace.bubble(),
        theory=expected,
        peak=peak,
        peak_rank=peaks.index(peak) if peaks else 0,
        unit=trace.unit,
    )


def stats_text(trace: Trace, theory: float | bool | None = True) -> str:
    d = describe(trace, theory)
    held = "micro-batches" if trace.schedule.v == 1 else "micro-batch chunks"
    text = f"makespan {d['makespan']:.4g} {d['unit']} · bubble {100 * d['bubble']:.1f}%"
    if d["theory"] is not None:
        text += f" (textbook {100 * d['theory']:.1f}%)"
    if trace.meta.get("device") == "cuda" and trace.meta.get("where"):  # a GPU's times, and how it was shared
        text += f" · {trace.meta['where']}"
    if trace.schedule.forward_only:  # serving: no activations wait for a backward
        return text + " · forward only: nothing kept for a backward"
    return text + f" · peak in-flight {d['peak']} {held} (rank {d['peak_rank']})"


def name_of(trace: Trace) -> str:
    s = trace.schedule
    m = s.m if s.updates is None else f"{s.updates.per_step} × {s.steps} steps"
    return f"{trace.source} {s.kind}  p={s.p} m={m}" + (f" v={s.v}" if s.v > 1 else "")


def rank_axis(trace: Trace, idle: bool = True) -> dict:
    """Rank 0 on top, one row per rank, range fixed so rows do not move while animating."""
    labels = [f"rank {r}" for r in range(trace.p)]
    if idle and trace.makespan:
        labels = [f"{lab}<br>idle {100 * b:.0f}%" for lab, b in zip(labels, trace.bubble_per_rank())]
    return dict(
        tickmode="array",
        tickvals=list(range(trace.p)),
        ticktext=labels,
        range=[trace.p - 0.5, -0.5],
        autorange=False,
        showgrid=False,
        zeroline=False,
        fixedrange=True,
    )


def time_axis(makespan: float, unit: str) -> dict:
    return dict(title=dict(text=f"time ({unit})"), range=[0, makespan * 1.01 or 1.0], autorange=False, zeroline=False)


# -- 1. the timeline ------------------------------------------------------------------------
def timeline(
    trace: Trace,
    *,
    title: str | None = None,
    theory: float | bool | None = True,
    show_waits: bool = True,
    height: int | None = None,
) -> go.Figure:
    """Ranks as rows, one bar per action, idle time empty; the title gives makespan, bubble
    (with the textbook value) and peak in-flight micro-batches.

    theory: True prints the textbook bubble when the schedule kind has one, a number prints
        that number, False prints none.
    show_waits: measured communication waits drawn (True) or only listed in the legend (False).
    """
    return figure(
        action_bars(trace) + wait_bars(trace, visible=show_waits) + collective_bars(trace) + action_marks(trace),
        timeline_layout(trace, title=title, theory=theory, height=height),
    )


def timeline_layout(
    trace: Trace,
    *,
    title: str | None = None,
    theory: float | bool | None = True,
    height: int | None = None,
    idle: bool = True,
) -> dict:
    heading = title if title is not None else name_of(trace)
    return dict(
        template=TEMPLATE,
        barmode="overlay",
        bargap=0,
        height=height or BASE_PX + ROW_PX * trace.p,
        title=dict(text=f"{heading}<br><sup>{stats_text(trace, theory)}</sup>", x=0.01, xanchor="left"),
        xaxis=time_axis(extent(trace), trace.unit),
        yaxis=rank_axis(trace, idle),
        uniformtext=dict(mode="hide", minsize=8),  # a label that does not fit is dropped, not shrunk
        margin=dict(l=70, r=20, t=70, b=50),
    )


# -- 2. the animation -----------------------------------------------------------------------
def phase(trace: Trace, t: float) -> str:
    """Where the pipeline is at time t (from the step's start): filling until every rank has
    started, draining once the first rank has finished, steady in between."""
    rows = [row for row in (trace.rank_events(r) for r in range(trace.p)) if row]
    if not rows or t <= 0:
        return "start"
    if t >= trace.makespan:
        return "done"
    filled = max(row[0].start for row in rows) - trace.start
    draining = min(max(e.end for e in row) for row in rows) - trace.start
    if t < filled:
        return "pipeline filling"
    if t > draining:
        return "pipeline draining"
    return "steady state"


def frame_times(trace: Trace, frames: int) -> list[float]:
    """`frames` moments, from the start (nothing drawn) to the makespan (the whole timeline)."""
    if frames < 2:
        raise ValueError(f"an animation needs at least 2 frames (first and last), got frames={frames}")
    return [trace.makespan * k / (frames - 1) for k in range(frames)]


def animate(
    trace: Trace,
    frames: int = 40,
    *,
    frame_ms: int = 120,
    title: str | None = None,
    theory: float | bool | None = True,
    show_waits: bool = True,
    height: int | None = None,
) -> go.Figure:
    """The timeline as plotly frames, with Play / Pause / Restart buttons and a time slider (drag
    or click it to step).

    Frame k shows every action that has started by its time, drawn up to that time, plus a
    cursor and the phase (filling, steady state, draining). The frames live in the figure, so it
    plays in the browser without a kernel, also in an exported HTML lesson. The number of frames
    is fixed whatever the size of the trace; the last one is the full timeline. A schedule's
    written sends, receives and FSDP actions are marked on `timeline` and `compare`, not here."""
    times = frame_times(trace, frames)
    bars = action_bars(trace) + wait_bars(trace, visible=show_waits) + collective_bars(trace)
    full = [bar["x"] for bar in bars]
    ends = [[a + w for a, w in zip(bar["base"], bar["x"])] for bar in bars]

    def moment(t: float) -> tuple[list[dict], dict]:
        # A frame is a partial update: only the bar widths and the cursor change.
        data = [dict(type="bar", x=widths(bar["base"], end, t)) for bar, end in zip(bars, ends)]
        layout = dict(
            shapes=[
                dict(
                    type="line",
                    x0=t,
                    x1=t,
                    y0=0,
                    y1=1,
                    xref="x",
                    yref="paper",
                    line=dict(color=INK, width=1.5, dash="dot"),
                )
            ],
            annotations=[
                dict(
                    x=0,
                    y=1.0,
                    xref="paper",
                    yref="paper",
                    xanchor="left",
                    yanchor="bottom",
                    showarrow=False,
                    text=f"t = {t:.4g} {trace.unit} · {phase(trace, t)}",
                )
            ],
        )
        return data, layout

    def go_to(names, duration):
        # redraw: bar widths are not animatable transitions for plotly, so each frame redraws
        return [
            names,
            dict(
                mode="immediate",
                fromcurrent=True,
                frame=dict(duration=duration, redraw=True),
                transition=dict(duration=0),
            ),
        ]

    first, cursor = moment(times[0])
    layout = timeline_layout(trace, title=title, theory=theory, height=height, idle=False)
    layout.update(cursor)
    # The controls sit below the plot. Paper coordinates are fractions of the plot area, so
    # place them in pixels: buttons and slider rail ~45 px under the axis, the slider's
    # current-value text above its rail. The slider replaces the x-axis title.
    margin = dict(l=70, r=20, t=90, b=110)
    layout.update(margin=margin, height=layout["height"] + 60)
    layout["xaxis"]["title"] = None
    below = -45 / (layout["height"] - margin["t"] - margin["b"])
    layout["updatemenus"] = [
        dict(
            type="buttons",
            direction="left",
            showactive=False,
            x=0,
            y=below,
            xanchor="left",
            yanchor="top",
            pad=dict(t=0, r=6),
            buttons=[
                dict(label="▶ Play", method="animate", args=go_to(None, frame_ms)),
                dict(label="Pause", method="animate", args=go_to([None], 0)),
                dict(label="Restart", method="animate", args=go_to(["0"], 0)),
            ],
        )
    ]
    layout["sliders"] = [
        dict(
            active=0,
            x=0.3,
            len=0.7,
            y=below * 0.6,
            xanchor="left",
            yanchor="top",
            pad=dict(t=0, b=0),
            currentvalue=dict(prefix="t = ", suffix=f" {trace.unit}", font=dict(color=INK), offset=4),
            font=dict(color=INK),
            ticklen=4,
            steps=[dict(label=f"{t:.3g}", method="animate", args=go_to([str(k)], 0)) for k, t in enumerate(times)],
        )
    ]
    for bar, x0 in zip(bars, first):
        bar["x"] = x0["x"]
    frame_list = []
    for k, t in enumerate(times):
        data, cursor = moment(t)
        frame_list.append(dict(name=str(k), data=data, traces=list(range(len(bars))), layout=cursor))
    frame_list[-1]["data"] = [dict(type="bar", x=x) for x in full]  # exactly the timeline's widths
    return figure(bars, layout, frame_list)


# -- 3. the comparison ----------------------------------------------------------------------
def compare(
    traces: Sequence[Trace],
    labels: Sequence[str] | None = None,
    *,
    theory: float | bool | None = True,
    show_waits: bool = True,
    height: int | None = None,
) -> go.Figure:
    """Several timelines stacked on one shared time axis, so the shorter makespan is visible at
    a glance: e.g. naive, GPipe, 1F1B and interleaved for the same p and m, or a simulated and a
    measured trace of the same run."""
    traces = list(traces)
    if not traces:
        raise ValueError("compare() needs at least one trace")
    labels = list(labels) if labels is not None else [name_of(t) for t in traces]
    titles = [f"{label}<br>{stats_text(t, theory)}" for t, label in zip(traces, labels)]
    rows = [t.p + 1.6 for t in traces]  # the extra is room for each subplot's two-line title
    grid = make_subplots(
        rows=len(traces),
        cols=1,
        shared_xaxes=True,
        subplot_titles=titles,
        row_heights=rows,
        vertical_spacing=min(0.08, 0.35 / len(traces)),
    )
    layout = grid.layout.to_plotly_json()
    data, seen = [], set()
    for i, t in enumerate(traces, 1):
        axis = "" if i == 1 else str(i)
        for bar in (
            action_bars(t, xaxis=f"x{axis}", yaxis=f"y{axis}")
            + wait_bars(t, visible=show_waits, xaxis=f"x{axis}", yaxis=f"y{axis}")
            + collective_bars(t, xaxis=f"x{axis}", yaxis=f"y{axis}")
            + action_marks(t, xaxis=f"x{axis}", yaxis=f"y{axis}")
        ):
            bar["showlegend"] = bar["legendgroup"] not in seen  # one legend entry per group
            seen.add(bar["legendgroup"])
            data.append(bar)
        layout[f"yaxis{axis}"].update(rank_axis(t))
        layout[f"xaxis{axis}"].update(range=[0, max(extent(x) for x in traces) * 1.01 or 1.0], zeroline=False)
    layout[f"xaxis{'' if len(traces) == 1 else len(traces)}"]["title"] = dict(text=f"time ({traces[0].unit})")
    for note in layout.get("annotations", []):  # the subplot titles: left aligned, smaller
        note.update(x=0, xanchor="left", align="left", font=dict(size=11))
    layout.update(
        template=TEMPLATE,
        barmode="overlay",
        bargap=0,
        uniformtext=dict(mode="hide", minsize=8),
        height=height or 80 + int(ROW_PX * sum(rows)),
        margin=dict(l=70, r=20, t=40, b=50),
    )
    return figure(data, layout)
