"""The decision guide as a map: which way of splitting wins as the model and the cluster grow.

    from minipipe.viz.guide import layout_map
    layout_map({"GPT-3 175B": {64: layout, 512: layout, 8: None}, ...})

One row per model, one column per GPU count; each cell is a layout (anything with tp, pp, dp and
zero, as minipipe.planner's Layout) or None where nothing fits. A cell is coloured by the split
that shapes it most, the first that applies of: a pipeline (pp > 1), tensor parallelism
(tp > 1), sharded data parallelism (ZeRO-3, FSDP: dp > 1), plain data parallelism; its text gives
the degrees. The colours are the traffic kinds' where a split has one (traffic.py: tensor purple,
data sky blue), Okabe-Ito for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from ..traffic import TrafficKind
from .style import INK, OKABE_ITO, TEMPLATE

FAMILIES = {  # name -> colour, in the order a cell is tested against them
    "pipeline, with tensor and data": OKABE_ITO["vermillion"],
    "tensor, with data": TrafficKind.TP_ALL_REDUCE.colour,
    "sharded data (FSDP, ZeRO-3)": OKABE_ITO["green"],
    "data": TrafficKind.DP_ALL_REDUCE.colour,
    "nothing fits": "rgba(128,128,128,0.15)",
}


def family(layout) -> str:
    """The split that shapes a layout most (see the module docstring)."""
    if layout is None:
        return "nothing fits"
    if layout.pp > 1:
        return "pipeline, with tensor and data"
    if layout.tp > 1:
        return "tensor, with data"
    if layout.zero == 3 and layout.dp > 1:
        return "sharded data (FSDP, ZeRO-3)"
    return "data"


def label(layout) -> str:
    """'TP 4 · PP 8 · DP 2 · ZeRO 3' (degrees of 1 and ZeRO 0 left out), '—' where nothing fits."""
    if layout is None:
        return "—"
    parts = [f"{name} {n}" for name, n in (("TP", layout.tp), ("PP", layout.pp), ("DP", layout.dp)) if n > 1]
    if layout.zero:
        parts.append(f"ZeRO {layout.zero}")
    return " · ".join(parts) or "1 GPU"


def layout_map(
    grid: Mapping[str, Mapping[int, object]],
    *,
    title: str = "",
    hover: Mapping | None = None,
    height: int | None = None,
) -> go.Figure:
    """grid[model][gpus]: a layout or None. `hover`, optional, the same shape: extra text per cell."""
    if not grid or not any(grid.values()):
        raise ValueError("layout_map() needs at least one model with at least one GPU count")
    models = list(grid)
    gpus = sorted({n for row in grid.values() for n in row})
    missing = [(m, n) for m in models for n in gpus if n not in grid[m]]
    if missing:
        raise ValueError(f"every model needs a cell for every GPU count; missing {missing[:3]}")
    names = list(FAMILIES)
    z = [[names.index(family(grid[m][n])) for n in gpus] for m in models]
    text = [[label(grid[m][n]) for n in gpus] for m in models]
    extra = [[(hover or {}).get(m, {}).get(n, "") for n in gpus] for m in models]
    steps = len(names)
    scale = [[edge, colour] for i, colour in enumerate(FAMILIES.values()) for edge in (i / steps, (i + 1) / steps)]
    columns = [f"{n:,} GPUs" for n in gpus]
    data = [
        go.Heatmap(
            z=z,
            x=columns,
            y=models,
            text=text,
            customdata=extra,
            texttemplate="%{text}",
            textfont=dict(size=11, color="black"),
            zmin=-0.5,
            zmax=steps - 0.5,
            colorscale=scale,
            showscale=False,
            xgap=3,
            ygap=3,
            hovertemplate="%{y} on %{x}: %{text}<br>%{customdata}<extra></extra>",
        )
    ]
    for name, colour in FAMILIES.items():  # a legend: one square per family
        data.append(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=name,
                marker=dict(symbol="square", size=13, color=colour, line=dict(width=1, color=INK)),
            )
        )
    fig = go.Figure(data=data)
    fig.update_layout(
        template=TEMPLATE,
        height=height or 160 + 44 * len(models),
        title=dict(text=title, x=0.01),
        margin=dict(l=20, r=20, t=80 if title else 30, b=80),
        xaxis=dict(title=dict(text="GPUs in the cluster"), side="bottom", showgrid=False),
        yaxis=dict(autorange="reversed", showgrid=False),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.14, yanchor="top"),
    )
    return fig
