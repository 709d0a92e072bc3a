"""The look every minipipe figure shares: Okabe-Ito colours, grey ink, a transparent template.

Okabe & Ito's palette stays distinct under every common colour-vision deficiency. The ops have
their colours in schedule/ops.py, the kinds of traffic theirs in traffic.py, both from it.
Backgrounds are transparent and text is mid grey, so the same figure reads on JupyterLab's light
and dark themes.
"""

from __future__ import annotations

import plotly.graph_objects as go

OKABE_ITO = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "vermillion": "#D55E00",
    "sky": "#56B4E9",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "black": "#000000",
}  # the eighth: the all-to-all's, drawn over actions only (not the dark page)
INK = "#808080"  # mid grey: contrast ~4:1 on white and on JupyterLab's dark #111
GRID = "rgba(128,128,128,0.25)"


def template() -> go.layout.Template:
    """Transparent background, grey ink: no white box on a dark theme, no dark text on it."""
    axis = dict(gridcolor=GRID, linecolor=GRID, zerolinecolor=GRID, color=INK)
    return go.layout.Template(
        layout=dict(
            paper_bgcolor="rgba(0,0,0,0)",
            plot_bgcolor="rgba(0,0,0,0)",
            font=dict(color=INK, family="Helvetica, Arial, sans-serif", size=12),
            xaxis=axis,
            yaxis=axis,
            legend=dict(bgcolor="rgba(0,0,0,0)"),
            hoverlabel=dict(font=dict(family="monospace")),
        )
    )


TEMPLATE = template().to_plotly_json()


def figure(data: list[dict], layout: dict, frames: list[dict] | None = None) -> go.Figure:
    """A go.Figure from dicts we built (and test), skipping plotly's per-element validation."""
    return go.Figure(data=data, layout=layout, frames=frames, _validate=False)
