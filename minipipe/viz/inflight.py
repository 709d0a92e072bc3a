"""The memory view of a `Trace`: the micro-batches whose activations each rank holds, over time.

GPipe beside 1F1B, one column per trace and one row per rank, on the same scales: GPipe climbs to
m on every rank, 1F1B stops at p - rank. It reads Trace.inflight_curve alone, so a simulated and
a measured step are drawn alike. `weight_versions` draws the other thing a pipeline without a flush
keeps, its weight versions (Trace.weight_versions_curve), the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..trace import Trace
from .style import OKABE_ITO, TEMPLATE, figure
from .timeline import name_of


def memory(
    traces: Trace | Sequence[Trace], labels: Sequence[str] | None = None, *, height: int | None = None
) -> go.Figure:
    """Micro-batches whose activations each rank holds, over time: one column per trace (e.g.
    GPipe beside 1F1B), one row per rank, the same scales everywhere. GPipe climbs to m on every
    rank; 1F1B stops at p - rank: the reason 1F1B exists."""
    return held_grid(
        traces,
        labels,
        lambda t, r: t.inflight_curve(r),
        lambda t: t.peak_inflight(),
        "Activations held per rank (micro-batches in flight)",
        "held",
        height,
    )


def weight_versions(
    traces: Trace | Sequence[Trace], labels: Sequence[str] | None = None, *, height: int | None = None
) -> go.Figure:
    """Versions of its weights each rank holds, over time (Trace.weight_versions_curve): one for a
    flushed run; PipeDream-2BW's two from its second step; PipeDream's one per micro-batch in flight."""
    return held_grid(
        traces,
        labels,
        lambda t, r: t.weight_versions_curve(r),
        lambda t: t.peak_weight_versions(),
        "Weight versions held per rank",
        "versions",
        height,
    )


def held_grid(traces, labels, curve, peaks_of, title: str, what: str, height: int | None) -> go.Figure:
    """One column per trace, one row per rank: `curve(trace, rank)`'s (time, amount) steps, filled."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    if not traces:
        raise ValueError("a held-over-time figure needs at least one trace")
    labels = list(labels) if labels is not None else [name_of(t) for t in traces]
    p, cols = max(t.p for t in traces), len(traces)
    peaks = [peaks_of(t) if t.events else [0] * t.p for t in traces]
    top = max(max(pk, default=0) for pk in peaks)
    titles = [
        f"{label}<br><sup>peak {max(pk)} {what} (rank {pk.index(max(pk))})</sup>" for label, pk in zip(labels, peaks)
    ]
    # make_subplots only lays out the grid; the traces are added as dicts below
    grid = make_subplots(
        rows=p,
        cols=cols,
        shared_xaxes="all",
        shared_yaxes="all",
        vertical_spacing=min(0.04, 0.3 / p),
        horizontal_spacing=0.06,
        column_titles=titles,
    )
    layout = grid.layout.to_plotly_json()
    data, notes = [], list(layout.get("annotations", []))
    for c, (t, pk) in enumerate(zip(traces, peaks)):
        for r in range(t.p):
            n = r * cols + c + 1
            axis = "" if n == 1 else str(n)
            # at an instant where one micro-batch is freed and the next allocated, keep only the
            # final count: the step line would otherwise draw a spike down and back up
            steps: dict[float, int] = {}
            for time, held in curve(t, r):
                steps[time - t.start] = held
            xs, ys = list(steps), list(steps.values())
            data.append(
                dict(
                    type="scatter",
                    mode="lines",
                    x=xs + [t.makespan],
                    y=ys + [ys[-1]],
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    line=dict(shape="hv", color=OKABE_ITO["sky"], width=1.5),
                    fill="tozeroy",
                    fillcolor="rgba(0,114,178,0.45)",
                    showlegend=False,
                    name=f"rank {r}",
                    hovertemplate=f"rank {r}<br>t %{{x:.3f}} {t.unit}<br>%{{y}} {what}<extra>{labels[c]}</extra>",
                )
            )
            notes.append(
                dict(
                    x=1,
                    y=1,
                    xref=f"x{axis} domain",
                    yref=f"y{axis} domain",
                    xanchor="right",
                    yanchor="top",
                    showarrow=False,
                    text=f"peak {pk[r]}",
                    font=dict(size=10),
                )
            )
    for r in range(p):
        layout[f"yaxis{'' if r == 0 else r * cols + 1}"]["title"] = dict(text=f"rank {r}")
    for key in [k for k in layout if k.startswith("yaxis")]:
        layout[key].update(range=[0, top * 1.15 + 0.1], nticks=3, fixedrange=True)
    layout[f"xaxis{'' if (p - 1) * cols + 1 == 1 else (p - 1) * cols + 1}"]["title"] = dict(
        text=f"time ({traces[0].unit})"
    )
    layout.update(
        template=TEMPLATE,
        annotations=notes,
        height=height or 120 + 70 * p,
        title=dict(text=title, x=0.01),
        margin=dict(l=70, r=20, t=100, b=50),
    )
    return figure(data, layout)
