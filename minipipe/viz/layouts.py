"""The comparison of layouts (minipipe.compare) as one figure: step time, bytes by kind, memory
per rank by kind — pipeline, tensor and data parallelism side by side on the same model.

    from minipipe.compare import compare
    from minipipe.viz.layouts import layouts_figure
    layouts_figure(compare(world=4, model="gpt"))
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..traffic import KINDS
from .style import OKABE_ITO, TEMPLATE

MEMORY = {
    "parameters": OKABE_ITO["blue"],
    "gradients": OKABE_ITO["orange"],
    "optimizer": OKABE_ITO["green"],
    "activations": OKABE_ITO["sky"],
    "dp_buckets": OKABE_ITO["yellow"],
}


def layouts_figure(rows, *, height: int = 900) -> go.Figure:
    """Three rows of bars, one group per layout: the step time; the bytes sent per step (all ranks)
    stacked by kind (in each kind's colour, traffic.py's, as on the timelines), with the formula's
    total as a marker; each rank's memory stacked by kind."""
    names = [row.layout.name for row in rows]
    fig = make_subplots(
        rows=3,
        cols=1,
        vertical_spacing=0.09,
        subplot_titles=[
            "step time (median, ms)",
            "bytes sent per step, all ranks (KiB; ◆ formula)",
            "memory per rank (KiB), by kind",
        ],
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[row.step_ms for row in rows],
            marker_color=OKABE_ITO["blue"],
            name="step time",
            showlegend=False,
            hovertemplate="%{x}: %{y:.2f} ms<extra></extra>",
        ),
        row=1,
        col=1,
    )
    for kind in KINDS:
        values = [row.sent[kind] / 1024 for row in rows]
        if any(values):
            fig.add_trace(
                go.Bar(
                    x=names,
                    y=values,
                    name=str(kind),
                    marker_color=kind.colour,
                    legendgroup="bytes",
                    legendgrouptitle_text="bytes",
                    hovertemplate=f"{kind}: %{{y:,.1f}} KiB<extra>%{{x}}</extra>",
                ),
                row=2,
                col=1,
            )
    fig.add_trace(
        go.Scatter(
            x=names,
            y=[sum(row.formula.values()) / 1024 for row in rows],
            mode="markers",
            marker=dict(symbol="diamond", size=10, color="rgba(128,128,128,0.9)"),
            name="formula (total)",
            legendgroup="bytes",
            hovertemplate="formula: %{y:,.1f} KiB<extra>%{x}</extra>",
        ),
        row=2,
        col=1,
    )
    ranks = [(row.layout.name, r) for row in rows for r in range(len(row.memory))]
    x = [[name for name, _ in ranks], [f"r{r}" for _, r in ranks]]
    for kind, colour in MEMORY.items():
        values = [getattr(row.memory[r], kind) / 1024 for row in rows for r in range(len(row.memory))]
        if any(values):
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=values,
                    name=kind.replace("_", " "),
                    marker_color=colour,
                    legendgroup="memory",
                    legendgrouptitle_text="memory",
                    hovertemplate=f"{kind}: %{{y:,.1f}} KiB<extra></extra>",
                ),
                row=3,
                col=1,
            )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        height=height,
        margin=dict(l=70, r=20, t=60, b=60),
        title=dict(text=f"The same model on {len(rows[0].memory) if rows else 0} processes, every layout", x=0.01),
    )
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="KiB", row=2, col=1)
    fig.update_yaxes(title_text="KiB", row=3, col=1)
    return fig
