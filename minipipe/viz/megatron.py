"""Megatron's f and g as a picture: where each sits in a split MLP and what it does, forward and back.

    from minipipe.viz.megatron import f_and_g
    f_and_g(t=4, x_shape=(8, 64), fc_shard=(64, 64), out_shard=(64, 64), nbytes=2048)

Two panels, forward on top, backward below, read in the direction the arrows run. Each tp rank
is a lane with its three pieces of the MLP: its rows of fc's weight (column-parallel), gelu on
its own features, its columns of out's weight (row-parallel). f stands before the lanes, g after
them, each as tall as every lane. What talks is filled in the tensor-parallel all-reduce's colour
(traffic.py; g forward, f backward); what only hands the tensor on is left empty. The lanes take
the op colours of the timelines: forward blue, backward orange (schedule/ops.py).

Every number the figure prints is an argument: the shapes a rank holds and the bytes an all-reduce
moves (with traffic.ring_bytes, what each rank sends of them). A picture, not a measurement: the
lesson checks the arithmetic it shows.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..schedule.ops import OPS
from ..traffic import TrafficKind, ring_bytes
from .style import INK, TEMPLATE, figure

# x positions of the columns: the tensor in, f, the rank's three pieces, g, the tensor out
COLUMNS = dict(x_in=0.0, f=1.8, fc=3.8, gelu=5.6, out=7.4, g=9.4, y_out=11.2)
BOX_W, LANE_H, GAP = 1.4, 1.0, 1.6  # a box's width, a lane's height, the space between panels
TALK = TrafficKind.TP_ALL_REDUCE


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n:,.0f} bytes"


def f_and_g(
    t: int, x_shape: tuple, fc_shard: tuple, out_shard: tuple, nbytes: float, *, height: int | None = None
) -> go.Figure:
    """The split MLP out(gelu(fc(x))) on `t` tp ranks. x_shape: the input's (and the output's)
    shape; fc_shard, out_shard: the weight each rank keeps of fc and of out; nbytes: the bytes of
    the tensor each all-reduce sums (the activation, x's size)."""
    if t < 1:
        raise ValueError(f"t must be the number of tensor-parallel ranks, >= 1; got {t}")
    sent = ring_bytes(TALK, nbytes, t)
    shapes, notes, arrows = [], [], []
    lane_top = {"forward": 0.0, "backward": t * LANE_H + GAP}
    for phase, top in lane_top.items():
        op = OPS["F" if phase == "forward" else "B"]
        mid = top + t * LANE_H / 2
        tall = dict(y0=top + 0.08, y1=top + t * LANE_H - 0.08)
        talks = {"forward": "g", "backward": "f"}[phase]
        grad = "" if phase == "forward" else "∂L/∂"
        x_shape_text = "×".join(map(str, x_shape))
        ends = {
            "x_in": f"{grad}x<br>{x_shape_text}",
            "y_out": f"{grad}y<br>{x_shape_text}" + ("<br>(Σ + out's bias)" if phase == "forward" else ""),
        }
        for name, text in ends.items():
            shapes.append(_box(COLUMNS[name], fill="rgba(0,0,0,0)", line=INK, **tall))
            notes.append(_text(COLUMNS[name], mid, text))
        for name in ("f", "g"):
            talking = name == talks
            shapes.append(
                _box(
                    COLUMNS[name],
                    fill=TALK.colour if talking else "rgba(0,0,0,0)",
                    line=TALK.colour if talking else INK,
                    dash=None if talking else "dot",
                    **tall,
                )
            )
            what = (
                f"<b>{name}</b><br>all-reduce Σ<br>{_kib(nbytes)}<br>each rank<br>sends {_kib(sent)}"
                if talking
                else f"<b>{name}</b><br>identity<br>(hands the<br>whole tensor<br>to every rank)"
            )
            notes.append(
                _text(
                    COLUMNS[name],
                    mid,
                    what,
                    colour="black" if talking else INK,
                    meta=dict(op=name, phase=phase, talks=talking),
                )
            )
        for i in range(t):
            y = top + (i + 0.5) * LANE_H
            forward = phase == "forward"
            pieces = {
                "fc": f"rank {i}: fc rows {_dims(fc_shard)}" + ("" if forward else "<br>→ its share of ∂L/∂x"),
                "gelu": "gelu" if forward else "gelu′",
                "out": f"out columns {_dims(out_shard)}" + ("<br>→ a partial y" if forward else ""),
            }
            for name, text in pieces.items():
                shapes.append(_box(COLUMNS[name], fill=op.colour, line=op.colour, y0=y - 0.38, y1=y + 0.38))
                notes.append(_text(COLUMNS[name], y, text, colour=op.ink, size=10))
            chain = [("f", "fc"), ("fc", "gelu"), ("gelu", "out"), ("out", "g")]
            for a, b in chain:
                arrows.append(_arrow(a, b, y, phase))
        for a, b in (("x_in", "f"), ("g", "y_out")):
            arrows.append(_arrow(a, b, mid, phase))
        title = (
            "<b>forward</b> (left to right): f hands x to every rank; each rank's partial output; g sums them"
            if phase == "forward"
            else "<b>backward</b> (right to left): g hands ∂L/∂y to every rank; f sums the ranks' shares of ∂L/∂x"
        )
        notes.append(
            dict(
                x=COLUMNS["x_in"] - BOX_W / 2,
                y=top - 0.12,
                xref="x",
                yref="y",
                text=title,
                showarrow=False,
                xanchor="left",
                yanchor="bottom",
                font=dict(size=12),
            )
        )
    total = 2 * t * LANE_H + GAP
    layout = dict(
        template=TEMPLATE,
        height=height or int(170 + 70 * 2 * t),
        margin=dict(l=10, r=10, t=70, b=10),
        title=dict(
            text=f"Megatron's f and g around an MLP split over t = {t} ranks"
            f"<br><sup>filled purple: an all-reduce ({TALK}); dotted: identity</sup>",
            x=0.01,
        ),
        xaxis=dict(visible=False, range=[COLUMNS["x_in"] - BOX_W / 2 - 0.1, COLUMNS["y_out"] + BOX_W / 2 + 0.1]),
        yaxis=dict(visible=False, range=[total + 0.1, -0.7]),
        shapes=shapes,
        annotations=notes + arrows,
        showlegend=False,
    )
    return figure([dict(type="scatter", x=[], y=[], hoverinfo="skip")], layout)


def _dims(shape: tuple) -> str:
    return "×".join(map(str, shape))


def _box(x: float, *, fill: str, line: str, y0: float, y1: float, dash: str | None = None) -> dict:
    return dict(
        type="rect",
        xref="x",
        yref="y",
        x0=x - BOX_W / 2,
        x1=x + BOX_W / 2,
        y0=y0,
        y1=y1,
        fillcolor=fill,
        line=dict(color=line, width=1.5, dash=dash or "solid"),
        layer="below",
    )


def _text(x: float, y: float, text: str, *, colour: str = INK, size: int = 11, meta: dict | None = None) -> dict:
    note = dict(x=x, y=y, xref="x", yref="y", text=text, showarrow=False, font=dict(size=size, color=colour))
    if meta:
        note["name"] = f"{meta['op']} {meta['phase']} {'all-reduce' if meta['talks'] else 'identity'}"
    return note


def _arrow(a: str, b: str, y: float, phase: str) -> dict:
    """An arrow between two columns at height y: a to b forward, b to a backward (the gradient
    runs the other way)."""
    left, right = COLUMNS[a] + BOX_W / 2, COLUMNS[b] - BOX_W / 2
    tail, head = (left, right) if phase == "forward" else (right, left)
    return dict(
        x=head,
        y=y,
        ax=tail,
        ay=y,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=2,
        arrowsize=1,
        arrowwidth=1.3,
        arrowcolor=INK,
        name=f"arrow {phase}",
    )
