"""The planner's ranking as a picture: where each layout's step goes, and what fills each GPU.

Left, one bar per layout (fastest on top): its step split into compute, tensor-parallel
collectives, pipeline idle time (the bubble, with the messages between stages), the exposed
gradient reduction and the optimizer step; right, the memory of its fullest GPU by kind, with the GPU's memory as a
dashed line. Same look as the course's other charts (timeline.TEMPLATE, Okabe-Ito colours).
The parts are the planner's own (planner.report.parts: compute, tensor-parallel collectives, the
context-parallel and ZeRO collectives inside the actions, the pipeline's idle time, the exposed
gradient reduction, the optimizer step).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..planner.report import PARTS, parts
from ..planner.search import plan
from .charts import KIND_COLOUR
from .style import INK, OKABE_ITO, TEMPLATE

# the memory panel speaks the course's memory colours (charts.KIND_COLOUR: blue, orange, green,
# vermillion); the time panel takes the other Okabe-Ito colours, so no colour means two things
COLOURS = dict(
    zip(PARTS, (OKABE_ITO["purple"], OKABE_ITO["yellow"], OKABE_ITO["blue"], OKABE_ITO["sky"], INK, "#999999"))
)
GiB = 2**30


def layouts_figure(result, top: int = 8, *, height: int | None = None) -> go.Figure:
    """The best `top` ways to cut the GPUs of a plan (planner.search.Layouts), each with its fastest
    choice of micro-batch, schedule and recomputation."""
    rows = result.distinct()[:top]
    if not rows:
        raise ValueError("no layout fits: nothing to draw (see the plan's closest misses)")
    names = [
        f"{r.layout.label()} · b={r.layout.micro_batch} · {r.layout.schedule_label()}"
        + (f" · recompute {r.layout.recompute}" if r.layout.recompute != "none" else "")
        + (f" · zero {r.layout.zero}" if r.layout.zero else "")
        for r in rows
    ]
    capacity = rows[0].capacity / GiB
    s = result.setup
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        column_widths=[0.62, 0.38],
        horizontal_spacing=0.03,
        subplot_titles=("step time by part (s)", f"memory of the fullest GPU (GiB; dashed: its {capacity:.1f})"),
    )
    for name in PARTS:
        colour = COLOURS[name]
        values = [parts(r)[name] for r in rows]
        fig.add_trace(
            go.Bar(
                y=names,
                x=values,
                name=name,
                orientation="h",
                marker=dict(color=colour),
                legendgroup="time",
                legendgrouptitle_text="step:",
                hovertemplate=[
                    f"{n}<br>{name}: {x:.2f} s of {r.step:.2f} s<extra></extra>" for n, x, r in zip(names, values, rows)
                ],
            ),
            row=1,
            col=1,
        )
    for kind in ("parameters", "gradients", "optimizer", "activations"):
        values = [r.memory[kind] / GiB for r in rows]
        fig.add_trace(
            go.Bar(
                y=names,
                x=values,
                name=kind,
                orientation="h",
                marker=dict(color=KIND_COLOUR[kind]),
                legendgroup="memory",
                legendgrouptitle_text="memory:",
                hovertemplate=[f"{n}<br>{kind}: {x:.1f} GiB<extra></extra>" for n, x in zip(names, values)],
            ),
            row=1,
            col=2,
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        height=height or 160 + 42 * len(rows),
        title=dict(
            x=0.01,
            text=f"{s.model.name} on {s.gpus} × {s.gpu.name}: the fastest layouts that fit<br><sup>"
            f"batch {s.batch} × {s.model.seq} tokens, matmuls at {s.efficiencies.gemm:.2f} of peak; "
            f"MFU of the best: {rows[0].mfu:.0%}</sup>",
        ),
        yaxis=dict(autorange="reversed"),
        margin=dict(l=20, r=20, t=90, b=40),
        legend=dict(orientation="h", x=0, y=-0.08, yanchor="top"),
        shapes=[
            dict(
                type="line",
                xref="x2",
                yref="paper",
                x0=capacity,
                x1=capacity,
                y0=0,
                y1=1,
                line=dict(color=INK, width=2, dash="dash"),
            )
        ],
    )
    fig.update_yaxes(automargin=True)
    return fig


def explore(model="gpt3-175b", gpus: int = 1024, gpu="a100-80gb", *, top: int = 8, **settings):
    """For a notebook: minipipe.planner.plan(...) and its best `top` ways to cut the GPUs as rows
    (dicts, one per cut, fastest first) and layouts_figure of them. Returns (rows, figure, the
    whole ranking)."""
    settings.setdefault("refine", top)
    result = plan(model, gpus, gpu, **settings)
    return [r.as_dict() for r in result.distinct()[:top]], layouts_figure(result, top), result
