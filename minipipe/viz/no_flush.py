"""Figures for pipelines without a flush (lesson 09b): loss curves side by side, and what a run of
steps trains per second, measured beside simulated.

    from minipipe.viz.no_flush import loss_curves, throughput
    loss_curves({"1F1B (flushed)": flushed.losses, "PipeDream-2BW": two_bw.losses})
    throughput({"1F1B": (measured, simulated), "2BW": (measured, simulated)}, unit="samples/s")

The staleness and the weight versions come from the schedule (Schedule.versions) and the Trace
(viz.inflight.weight_versions); these two read plain numbers. Same look as every figure here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from .style import OKABE_ITO, TEMPLATE, figure

COLOURS = [OKABE_ITO[c] for c in ("blue", "orange", "green", "vermillion", "purple", "sky")]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]  # told apart without colour too


def loss_curves(
    curves: Mapping[str, Sequence[float]],
    *,
    title: str = "Loss per step, the same data and learning rate",
    height: int = 380,
) -> go.Figure:
    """One line per run, the step's mean loss against the step (each run sees the same batches)."""
    if not curves:
        raise ValueError("loss_curves needs at least one run's losses")
    data = [
        dict(
            type="scatter",
            mode="lines",
            name=name,
            x=list(range(len(ys))),
            y=list(ys),
            line=dict(color=COLOURS[i % len(COLOURS)], dash=DASHES[i % len(DASHES)], width=2),
            hovertemplate=f"{name}<br>step %{{x}}<br>loss %{{y:.4f}}<extra></extra>",
        )
        for i, (name, ys) in enumerate(curves.items())
    ]
    layout = dict(
        template=TEMPLATE,
        height=height,
        title=dict(text=title, x=0.01),
        xaxis=dict(title=dict(text="training step")),
        yaxis=dict(title=dict(text="loss (mean over the batch)")),
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=70, r=20, t=60, b=90),
    )
    return figure(data, layout)


def throughput(
    runs: Mapping[str, tuple[float, float]],
    *,
    unit: str = "samples/s",
    title: str = "What a run of steps trains per second",
    height: int = 360,
) -> go.Figure:
    """Grouped bars, one group per run: its measured figure beside its simulated one."""
    if not runs:
        raise ValueError("throughput needs at least one run")
    names = list(runs)
    data = [
        dict(
            type="bar",
            name=which,
            x=names,
            y=[runs[n][i] for n in names],
            marker=dict(color=colour),
            text=[f"{runs[n][i]:.0f}" for n in names],
            textposition="outside",
            hovertemplate=f"%{{x}}<br>{which}: %{{y:.1f}} {unit}<extra></extra>",
        )
        for i, (which, colour) in enumerate((("measured", OKABE_ITO["blue"]), ("simulated", OKABE_ITO["sky"])))
    ]
    top = max(max(v) for v in runs.values())
    layout = dict(
        template=TEMPLATE,
        height=height,
        barmode="group",
        title=dict(text=title, x=0.01),
        yaxis=dict(title=dict(text=unit), range=[0, 1.2 * top]),
        margin=dict(l=70, r=20, t=60, b=50),
    )
    return figure(data, layout)
