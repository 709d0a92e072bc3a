"""Data parallelism's gradient buckets on a measured step: when each bucket's all-reduce starts,
next to the backward that makes its gradients.

    from minipipe.viz.buckets import bucket_overlap
    bucket_overlap({"overlap on": trace, "overlap off": other}, labels=["layers 5-6", ...])

One panel per trace (e.g. the same run with and without overlap), time from the step's start in
ms. The top row is one rank's actions (the timelines' op colours); below it, one lane per bucket,
its all-reduce from launch (a diamond) until the rank found it complete, in the dp all-reduce's
colour (traffic.py). A dashed line marks the end of the rank's last backward: what starts left of
it overlaps the backward. The buckets are the rank's dp all-reduces in the order they were
launched, which is the bucket order (parallel/data.py launches them strictly in index order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..trace import Trace
from ..traffic import TrafficKind
from .bars import OP_COLOR, OP_INK, OP_NAME
from .style import INK, TEMPLATE

DP = TrafficKind.DP_ALL_REDUCE
COMPUTE = "compute"


def bucket_talks(trace: Trace, rank: int = 0) -> list:
    """The rank's gradient all-reduces in a step, in launch order: bucket 0 first."""
    return sorted((c for c in trace.collectives if c.rank == rank and c.kind is DP), key=lambda c: c.start)


def backward_end(trace: Trace, rank: int = 0) -> float:
    """When the rank's last backward (B, or the weight half W of a split one) ended."""
    ends = [e.end for e in trace.rank_events(rank) if e.action.op in ("B", "W")]
    if not ends:
        raise ValueError(f"rank {rank} ran no backward in this trace: nothing for its gradients to overlap")
    return max(ends)


def bucket_overlap(
    traces: Mapping[str, Trace], labels: Sequence[str] | None = None, *, rank: int = 0, height: int | None = None
) -> go.Figure:
    """Each trace's step on `rank`: its actions, and its buckets' all-reduces against the end of its
    backward. `labels`: one per bucket (what it holds), shown beside its lane."""
    if not traces:
        raise ValueError("bucket_overlap() needs at least one trace")
    counts = {name: len(bucket_talks(trace, rank)) for name, trace in traces.items()}
    if not any(counts.values()):
        raise ValueError(f"no gradient all-reduces on rank {rank} in these traces: run with dp > 1")
    n = max(counts.values())
    labels = list(labels) if labels is not None else [f"bucket {k}" for k in range(n)]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} buckets: give one per bucket")
    lanes = [f"rank {rank}: {COMPUTE}"] + labels
    fig = make_subplots(rows=len(traces), cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=list(traces))
    seen = set()
    for row, trace in enumerate(traces.values(), 1):
        t0 = trace.start
        for e in trace.rank_events(rank):
            op = e.action.op
            fig.add_trace(
                go.Bar(
                    base=[e.start - t0],
                    x=[e.duration],
                    y=[lanes[0]],
                    orientation="h",
                    width=0.8,
                    marker=dict(color=OP_COLOR[op]),
                    text=[str(e.action)],
                    textposition="inside",
                    insidetextanchor="middle",
                    textfont=dict(color=OP_INK[op]),
                    name=OP_NAME[op],
                    legendgroup=op,
                    showlegend=op not in seen,
                    hovertemplate=f"{e.action}: %{{base:.2f}} to {e.end - t0:.2f} ms<extra></extra>",
                ),
                row=row,
                col=1,
            )
            seen.add(op)
        talks = bucket_talks(trace, rank)
        fig.add_trace(
            go.Bar(
                base=[c.start - t0 for c in talks],
                x=[c.end - c.start for c in talks],
                y=labels[: len(talks)],
                orientation="h",
                width=0.55,
                marker=dict(color=DP.colour),
                name=f"{DP}, launch to found complete",
                legendgroup="dp",
                showlegend="dp" not in seen,
                hovertemplate=[
                    f"{label}: launched {c.start - t0:.2f} ms, found complete {c.end - t0:.2f} ms, "
                    f"{c.nbytes:,.0f} bytes sent<extra></extra>"
                    for label, c in zip(labels, talks)
                ],
            ),
            row=row,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=[c.start - t0 for c in talks],
                y=labels[: len(talks)],
                mode="markers",
                name="launched",
                marker=dict(symbol="diamond", size=9, color=DP.colour, line=dict(width=1, color=INK)),
                legendgroup="launch",
                showlegend="launch" not in seen,
                hoverinfo="skip",
            ),
            row=row,
            col=1,
        )
        seen |= {"dp", "launch"}
        end = backward_end(trace, rank) - t0
        fig.add_vline(
            x=end,
            line=dict(color=INK, dash="dash", width=1.5),
            row=row,
            col=1,
            annotation_text="last backward ends",
            annotation_position="top right",
            annotation_font=dict(size=11, color=INK),
        )
        fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], row=row, col=1)
    fig.update_xaxes(title_text="time from the step's start (ms)", row=len(traces), col=1)
    fig.update_layout(
        template=TEMPLATE,
        barmode="overlay",
        height=height or 130 + len(traces) * (60 + 26 * len(lanes)),
        margin=dict(l=20, r=20, t=70, b=100),
        legend=dict(orientation="h", y=-0.08, yanchor="top", x=0.5, xanchor="center"),
        title=dict(
            text=f"Gradient buckets on rank {rank}: each all-reduce from its launch until found complete",
            x=0.01,
            y=0.98,
        ),
    )
    return fig
