"""Charts the lessons need more than once, beyond the timeline family (timeline.py): the bubble
as m grows, memory by kind against a device, and the three ways to split a model.

    from minipipe.viz.charts import bubble_vs_m, memory_by_kind, three_ways_to_split
    bubble_vs_m("gpipe", p=2, ms=[1, 2, 4, 8], points={"simulated": sims, "measured": traces})
    memory_by_kind({"GPT-3 175B": planner.shapes.training_bytes(...)}, device_bytes=80 * 2**30)

Same look as the timelines: style.TEMPLATE (transparent, grey ink) and Okabe-Ito colours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..schedule import kinds, theory
from ..trace import Trace
from .style import INK, OKABE_ITO, TEMPLATE

# one colour per definition of the bubble, the same in every lesson
DEFINITIONS = {
    "idle/total": dict(colour=OKABE_ITO["blue"], theory=theory.bubble_fraction, of=lambda bubble: bubble),
    "bubble/ideal": dict(
        colour=OKABE_ITO["orange"],
        theory=theory.bubble_ratio,
        of=lambda bubble: bubble / (1 - bubble) if bubble < 1 else math.inf,
    ),
}


def bubble_points(traces: Sequence[Trace]) -> dict[int, float]:
    """m -> the median idle/total bubble of the traces with that m (several steps of a run
    give several traces; the median keeps one slow step from moving the point)."""
    by_m: dict[int, list[float]] = {}
    for t in traces:
        by_m.setdefault(t.schedule.m, []).append(t.bubble())
    return {m: median(bs) for m, bs in sorted(by_m.items())}


MARKERS = ("circle-open", "square-open", "diamond", "x", "triangle-up-open")


def bubble_vs_m(
    kind: str,
    p: int,
    ms: Sequence[int],
    points: Mapping[str, Sequence[Trace]] | None = None,
    *,
    v: int | None = None,
    height: int = 440,
) -> go.Figure:
    """The bubble of `kind` on p ranks as the number of micro-batches m grows, in both common
    definitions: idle/total (the share of all ranks' time spent idle, Trace.bubble) and
    bubble/ideal (idle time over the bubble-free step, (p−1)/m for GPipe and 1F1B: the
    Ultra-Scale Playbook's and Megatron's). Lines are the textbook formulas at every whole m
    up to max(ms); `points` adds a marker per m for each named group of traces, e.g.
    {"simulated": [...], "measured": [...]} (the median per m; in the order given: open
    circles, open squares, filled diamonds, ...). Traces must be of `kind` with p ranks."""
    ms = sorted(set(ms))
    if not ms or ms[0] < 1:
        raise ValueError(f"ms must be micro-batch counts >= 1, got {list(ms)}")
    points = dict(points or {})
    if len(points) > len(MARKERS):
        raise ValueError(f"bubble_vs_m draws at most {len(MARKERS)} groups of points, got {len(points)}")
    for t in [t for traces in points.values() for t in traces]:
        if t.schedule.kind != kind or t.p != p:
            raise ValueError(
                f"a trace of {t.schedule.kind} with p={t.p} was given to a chart of {kind} with "
                f"p={p}; pass traces of that schedule only"
            )
    line_ms = list(range(1, ms[-1] + 1))
    data = []
    for name, d in DEFINITIONS.items():
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=line_ms,
                y=[d["theory"](kind, p, m, v) for m in line_ms],
                name=f"{name}: textbook",
                line=dict(color=d["colour"], width=2),
                legendgroup=name,
                hovertemplate=f"{name} textbook<br>m=%{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
        for (label, traces), symbol in zip(points.items(), MARKERS):
            medians = bubble_points(traces)
            data.append(
                dict(
                    type="scatter",
                    mode="markers",
                    x=list(medians),
                    y=[d["of"](b) for b in medians.values()],
                    name=f"{name}: {label}",
                    legendgroup=name,
                    marker=dict(color=d["colour"], symbol=symbol, size=11, line=dict(width=2, color=d["colour"])),
                    hovertemplate=f"{name} {label}<br>m=%{{x}}: %{{y:.3f}}<extra></extra>",
                )
            )
    layout = dict(
        template=TEMPLATE,
        height=height,
        margin=dict(l=70, r=20, t=70, b=50),
        title=dict(text=f"The bubble of {kind} on p={p} ranks as m grows<br><sup>{_formula_text(kind)}</sup>", x=0.01),
        xaxis=dict(
            title=dict(text="micro-batches per step (m)"), type="log", tickvals=ms, ticktext=[str(m) for m in ms]
        ),
        yaxis=dict(title=dict(text="bubble (a fraction: idle time over total, or over ideal)"), rangemode="tozero"),
        legend=dict(x=1, xanchor="right", y=1, groupclick="toggleitem"),
    )
    return go.Figure(data=data, layout=layout)


def _formula_text(kind: str) -> str:
    fraction = kinds.get(kind).bubble_formula
    return (
        f"idle/total = {fraction} · bubble/ideal = idle/total ÷ (1 − idle/total)"
        if fraction
        else "idle/total and bubble/ideal = idle/total ÷ (1 − idle/total)"
    )


# -- memory by kind -------------------------------------------------------------------------
KIND_COLOUR = {
    "parameters": OKABE_ITO["blue"],
    "gradients": OKABE_ITO["orange"],
    "optimizer": OKABE_ITO["green"],
    "activations": OKABE_ITO["vermillion"],
    "total": INK,
}


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 2.8e12 -> '2.5 TiB' (powers of 1024, as device memory is sold)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def binary_ticks(bars: list[dict], *also: float) -> dict:
    """Ticks at 1, 10 and 100 KiB, MiB, GiB, TiB over the bars' range: plotly's own log ticks
    say 'B' for billions, which next to bytes reads as bytes."""
    values = [x for bar in bars for x in bar["x"] if x > 0] + [x for x in also if x > 0]
    lo, hi = math.floor(math.log(min(values), 1024)), math.ceil(math.log(max(values), 1024))
    ticks = [1024.0**k * f for k in range(lo, hi + 1) for f in (1, 10, 100)]
    ticks = [t for t in ticks if min(values) / 10 <= t <= max(values) * 10]
    return dict(tickvals=ticks, ticktext=[human_bytes(t) for t in ticks])


def memory_by_kind(
    models: Mapping[str, Mapping[str, float]],
    device_bytes: float,
    device: str = "one device",
    *,
    height: int | None = None,
) -> go.Figure:
    """For each model (name -> {kind: bytes}, e.g. planner.shapes.training_bytes), one bar per kind
    and one for their total, on a log scale, with the device's memory as a dashed line: every
    bar to the right of the line is more than one device can hold on its own."""
    if not models:
        raise ValueError("memory_by_kind() needs at least one model")
    names = list(models)
    kinds = list(dict.fromkeys(k for by_kind in models.values() for k in by_kind))
    data = []
    for kind in [*kinds, "total"]:
        values = [sum(models[n].values()) if kind == "total" else models[n].get(kind, 0) for n in names]
        data.append(
            dict(
                type="bar",
                orientation="h",
                y=names,
                x=values,
                name=kind,
                marker=dict(color=KIND_COLOUR.get(kind, OKABE_ITO["purple"])),
                text=[human_bytes(x) for x in values],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=[
                    f"{n}<br>{kind}: {human_bytes(x)} = {x / device_bytes:.3g} × {device}<extra></extra>"
                    for n, x in zip(names, values)
                ],
            )
        )
    layout = dict(
        template=TEMPLATE,
        barmode="group",
        height=height or 140 + 130 * len(names),
        title=dict(text=f"Training memory by kind, against {device} ({human_bytes(device_bytes)})", x=0.01),
        xaxis=dict(title=dict(text="bytes (log scale)"), type="log", **binary_ticks(data, device_bytes)),
        yaxis=dict(autorange="reversed"),
        margin=dict(l=150, r=60, t=60, b=50),
        legend=dict(traceorder="normal"),
        shapes=[
            dict(
                type="line",
                x0=device_bytes,
                x1=device_bytes,
                y0=0,
                y1=1,
                yref="paper",
                line=dict(color=OKABE_ITO["purple"], width=2, dash="dash"),
            )
        ],
        annotations=[
            dict(
                x=math.log10(device_bytes),
                y=1,
                yref="paper",
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                text=f" {device}",
                font=dict(color=OKABE_ITO["purple"]),
            )
        ],
    )
    return go.Figure(data=data, layout=layout)


# -- three ways to split --------------------------------------------------------------------
SPLITS = {
    "pipeline": ("Pipeline: between layers", "activations, once per cut (point to point)"),
    "tensor": ("Tensor: within each layer", "partial results, inside every layer (all-reduce)"),
    "data": ("Data: whole replicas", "gradients, once per step (all-reduce)"),
}


def owner(split: str, layer: int, column: int, layers: int, columns: int, devices: int) -> int:
    """Which device holds (layer, column) of the weights: pipeline cuts the layer list, tensor
    cuts every layer's columns; data parallelism gives every device everything (its replica)."""
    if split == "pipeline":
        return layer * devices // layers
    if split == "tensor":
        return column * devices // columns
    raise ValueError(f"in data parallelism every device holds all weights; ask 'pipeline' or 'tensor', got {split!r}")


def three_ways_to_split(layers: int = 4, columns: int = 4, devices: int = 2, *, height: int = 340) -> go.Figure:
    """A model drawn as `layers` rows of weight blocks, coloured by the device that holds each
    block, split three ways; below each, what the devices must exchange."""
    colours = [OKABE_ITO[c] for c in ("blue", "orange", "green", "vermillion", "sky", "purple")]
    if not 1 <= devices <= len(colours):
        raise ValueError(f"devices must be 1..{len(colours)}, got {devices}")
    titles = [
        title + (f", each on 1/{devices} of the batch" if split == "data" else "")
        for split, (title, _) in SPLITS.items()
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.06)
    shapes, notes = [], list(fig.layout.annotations)
    for i, split in enumerate(SPLITS, 1):
        ax = "" if i == 1 else str(i)
        copies = devices if split == "data" else 1
        width = columns * copies + (copies - 1)  # replicas side by side, a gap between
        for copy in range(copies):
            for layer in range(layers):
                for col in range(columns):
                    dev = copy if split == "data" else owner(split, layer, col, layers, columns, devices)
                    x0 = copy * (columns + 1) + col
                    shapes.append(
                        dict(
                            type="rect",
                            xref=f"x{ax}",
                            yref=f"y{ax}",
                            x0=x0 + 0.06,
                            x1=x0 + 0.94,
                            y0=layer + 0.08,
                            y1=layer + 0.92,
                            line=dict(width=0),
                            fillcolor=colours[dev],
                            opacity=0.85,
                        )
                    )
        fig.add_trace(
            go.Scatter(
                x=[0, width], y=[0, layers], mode="markers", marker=dict(opacity=0), hoverinfo="skip", showlegend=False
            ),
            row=1,
            col=i,
        )
        fig.update_xaxes(range=[-0.2, max(width, columns) + 0.2], visible=False, row=1, col=i)
        fig.update_yaxes(
            range=[layers + 0.2, -0.2],
            row=1,
            col=i,
            showgrid=False,
            zeroline=False,
            tickvals=[k + 0.5 for k in range(layers)] if i == 1 else [],
            ticktext=[f"layer {k}" for k in range(layers)],
        )
        notes.append(
            dict(
                x=0.5,
                y=-0.03,
                xref=f"x{ax} domain",
                yref="paper",
                showarrow=False,
                yanchor="top",
                text=f"sends: {SPLITS[split][1]}",
                font=dict(size=11),
            )
        )
    for dev in range(devices):  # a legend: one entry per device
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=f"device {dev}",
                marker=dict(color=colours[dev], size=12, symbol="square"),
            ),
            row=1,
            col=1,
        )
    fig.update_layout(
        template=TEMPLATE,
        shapes=shapes,
        annotations=notes,
        height=height,
        margin=dict(l=60, r=20, t=60, b=70),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.2, yanchor="top"),
        title=None,
    )
    for note in fig.layout.annotations[:3]:
        note.font = dict(size=13)
    return fig
