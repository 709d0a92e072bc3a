"""Serving pictures: latency against throughput as the micro-batch size changes.

    from minipipe.viz.latency_throughput import latency_throughput
    latency_throughput(results)      # StreamResults, simulated and measured, of several layouts

One line per layout (1 process, pipeline p=2, tensor tp=2, ...) and source, one point per
micro-batch size, labelled k=…: simulated points as open circles on dashed lines, measured ones
as filled diamonds on solid lines (as the course's other charts draw them). The point is the
median latency; its whisker reaches up to p99. Right is more requests served per second, down is
a faster answer: a pipeline moves the points right, never down. The timeline of one run is
timeline.timeline(result.trace), like any other trace.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..sim.request_stream import StreamResult
from .style import OKABE_ITO, TEMPLATE, figure

LAYOUT_COLOURS = (
    OKABE_ITO["blue"],
    OKABE_ITO["orange"],
    OKABE_ITO["green"],
    OKABE_ITO["vermillion"],
    OKABE_ITO["purple"],
    OKABE_ITO["sky"],
)
LOOK = {"simulated": dict(symbol="circle-open", dash="dash"), "measured": dict(symbol="diamond", dash="solid")}


def latency_throughput(results: Sequence[StreamResult], *, title: str | None = None, height: int = 460) -> go.Figure:
    """Median latency (whisker to p99) against throughput, one line per layout and source, a point
    per micro-batch size; see the module docstring."""
    results = list(results)
    if not results:
        raise ValueError("latency_throughput() needs at least one StreamResult (from serve or simulate_serving)")
    if any(not isinstance(r, StreamResult) for r in results):
        raise ValueError(
            "latency_throughput() draws StreamResults, from minipipe.serve.api.serve or "
            "minipipe.sim.request_stream.simulate_serving"
        )
    layouts = list(dict.fromkeys(r.label for r in results))
    groups: dict[tuple[str, str], list[StreamResult]] = {}
    for r in results:
        groups.setdefault((r.label, r.source), []).append(r)
    data = []
    for (label, source), members in sorted(
        groups.items(), key=lambda g: (g[0][1] != "simulated", layouts.index(g[0][0]))
    ):
        members.sort(key=lambda r: r.stream.microbatch)
        colour, look = LAYOUT_COLOURS[layouts.index(label) % len(LAYOUT_COLOURS)], LOOK.get(source, LOOK["measured"])
        data.append(
            dict(
                type="scatter",
                mode="lines+markers+text",
                name=f"{label} · {source}",
                legendgroup=label,
                x=[r.throughput for r in members],
                y=[r.p50 for r in members],
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[r.p99 - r.p50 for r in members],
                    arrayminus=[0] * len(members),
                    color=colour,
                    thickness=1,
                    width=3,
                ),
                text=[f"k={r.stream.microbatch}" for r in members],
                textposition="top right",
                textfont=dict(color=colour, size=10),
                line=dict(color=colour, width=1.5, dash=look["dash"]),
                marker=dict(color=colour, symbol=look["symbol"], size=10, line=dict(width=2, color=colour)),
                hovertext=[
                    f"<b>{label}</b> {source}, micro-batches of {r.stream.microbatch}<br>"
                    f"{r.throughput:,.0f} requests/s<br>latency p50 {r.p50:.2f} · p95 {r.p95:.2f} · "
                    f"p99 {r.p99:.2f} ms"
                    for r in members
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    stream = results[0].stream
    rate = "all at once" if stream.rate is None else f"arriving at {stream.rate:g}/s"
    heading = title or "Latency against throughput as the micro-batch size k changes"
    layout = dict(
        template=TEMPLATE,
        height=height,
        margin=dict(l=70, r=20, t=70, b=50),
        title=dict(
            text=f"{heading}<br><sup>{stream.requests} requests {rate}; point: median latency, "
            f"whisker: up to p99</sup>",
            x=0.01,
            xanchor="left",
        ),
        xaxis=dict(title=dict(text="throughput (requests/s)"), rangemode="tozero"),
        yaxis=dict(title=dict(text="latency (ms, log scale)"), type="log"),  # queueing spans decades
        legend=dict(groupclick="toggleitem"),
    )
    return figure(data, layout)
