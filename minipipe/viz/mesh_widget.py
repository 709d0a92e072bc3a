"""A widget that picks the mesh of a world of 8 (pp, dp, cp, ep, tp) and shows, axis by axis,
which ranks form each group, which link a group needs when the 8 ranks sit on two servers of 4
GPUs, and the bytes a rank sends along it per step.

    from minipipe.viz.mesh_widget import MeshExplorer
    MeshExplorer()

The groups are minipipe.parallel.mesh's (torch's DeviceMesh order, ep borrowed from dp × cp);
the links sim.network's; the bytes minipipe.parallel.accounting's, from the shapes of a small GPT
alone (no process starts): the figures a real run of the same mesh measures (lesson 13b holds
them to one). The gradient average runs over the dp × cp ranks, so the dp row counts that
group's all-reduce. An axis whose traffic the GPT has none of (ep, without experts) says so.
"""

from __future__ import annotations

import html
from functools import cache

import ipywidgets as W
import plotly.graph_objects as go

from ..parallel.mesh import AXES, Mesh
from ..sim.network import Link, Network
from ..traffic import KINDS, TrafficKind
from .offline import StaticFallback
from .style import OKABE_ITO, TEMPLATE
from .widgets import BOX, FIGURE_WIDTH, WIDE, note_html

WORLD = 8
GPUS_PER_NODE = 4
# a GPT that every mesh of 8 can cut: 8 heads (tp up to 8), 16 tokens (2·cp chunks up to cp = 8), 8 blocks (pp up to 8)
GPT = dict(width=64, heads=8, depth=8, block=16, vocab=32)
M, BATCH = 8, 64
GROUP_OF = {"dp": "dp_cp"}  # whose group an axis's bytes cross: the gradient average is over dp × cp
COLOURS = {
    "pp": TrafficKind.PP_ACTIVATION.colour,
    "dp": TrafficKind.DP_ALL_REDUCE.colour,
    "cp": TrafficKind.CP_RING.colour,
    "ep": OKABE_ITO["vermillion"],
    "tp": TrafficKind.TP_ALL_REDUCE.colour,
}
TWO_SERVERS = Network(inside=Link(1.0), between=Link(1.0), gpus_per_node=GPUS_PER_NODE)


def kinds_of(axis: str) -> list[TrafficKind]:
    """The traffic kinds that cross `axis` (traffic.py's)."""
    return [k for k in KINDS if k.axis == axis]


@cache
def sent_by_rank(
    pp: int, dp: int, cp: int, tp: int, gpt: tuple = tuple(GPT.items()), m: int = M, batch_size: int = BATCH
) -> tuple[dict, ...]:
    """Bytes each global rank sends in one step, by kind, for the course GPT (`gpt`: its
    model_args' items) on this mesh, 1F1B with `m` micro-batches of a `batch_size` batch:
    accounting.expected_bytes on the run's plan. A ValueError if the run could not be made."""
    from ..engine.config import RunConfig, prepare
    from ..models import task_of
    from ..parallel.accounting import expected_bytes

    config = RunConfig(
        schedule="1f1b",
        p=pp,
        dp=dp,
        cp=cp,
        tp=tp,
        m=m,
        model="gpt",
        model_args=dict(gpt),
        batch_size=batch_size,
        oversubscribe=True,
    )
    plan, layers = prepare(config), task_of(config).layers()
    return tuple(expected_bytes(plan, rank, layers) for rank in range(plan.mesh.world))


def axis_rows(mesh: Mesh, sent: list[dict] | tuple[dict, ...], network: Network = TWO_SERVERS) -> list[dict]:
    """One row per axis of AXES: its size, the groups its traffic crosses (dp's: the dp × cp
    ranks) and how many ranks each holds (`talkers`), the links they need, and the most bytes a
    rank sends along it per step (None where none of its kinds has a byte: nothing crosses it)."""
    rows = []
    for axis in AXES:
        over = GROUP_OF.get(axis, axis)
        talks = [sum(s.get(k, 0) for k in kinds_of(axis)) for s in sent]
        rows.append(
            dict(
                axis=axis,
                size=mesh.size(axis),
                groups=mesh.groups(over),
                over=over,
                talkers=mesh.size(over),
                links=sorted({network.where(g) for g in mesh.groups(over) if len(g) > 1}),
                bytes=max(talks) if any(talks) else None,
            )
        )
    return rows


def groups_figure(mesh: Mesh, rows: list[dict]) -> go.Figure:
    """The ranks along x, one row per axis; each group a line through its ranks, the servers apart."""
    fig = go.Figure()
    for y, row in enumerate(reversed(rows)):
        if row["talkers"] == 1:
            continue
        n = len(row["groups"])
        for i, group in enumerate(row["groups"]):
            lift = y + 0.6 * (i - (n - 1) / 2) / max(n, 2)
            fig.add_trace(
                go.Scatter(
                    x=list(group),
                    y=[lift] * len(group),
                    mode="lines+markers",
                    showlegend=False,
                    line=dict(color=COLOURS[row["axis"]], width=3),
                    marker=dict(size=9),
                    hovertemplate=f"{row['axis']} group {group}<extra></extra>",
                )
            )
    fig.add_vline(x=GPUS_PER_NODE - 0.5, line=dict(dash="dash", color=OKABE_ITO["vermillion"]))
    for node in range(mesh.world // GPUS_PER_NODE):
        fig.add_annotation(
            x=node * GPUS_PER_NODE + (GPUS_PER_NODE - 1) / 2, y=len(rows) - 0.4, showarrow=False, text=f"server {node}"
        )
    labels = [
        f"{r['axis']} {r['size']}" + (f" ({r['over'].replace('_', '×')})" if r["over"] != r["axis"] else "")
        for r in reversed(rows)
    ]
    fig.update_layout(
        template=TEMPLATE,
        width=FIGURE_WIDTH,
        height=320,
        margin=dict(l=70, r=20, t=40, b=40),
        title=f"the groups of {mesh.describe()} on two servers of {GPUS_PER_NODE} GPUs",
        xaxis=dict(title="global rank", tickmode="linear", dtick=1, range=[-0.5, mesh.world - 0.5]),
        yaxis=dict(tickmode="array", tickvals=list(range(len(rows))), ticktext=labels, range=[-0.6, len(rows) - 0.2]),
    )
    return fig


def rows_html(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        if r["talkers"] == 1:
            what, links = "size 1: no group talks", "none"
        else:
            what = " ".join(str(g) for g in r["groups"])
            links = ", ".join(r["links"]) or "none"
        over = f" (gradients averaged over {r['over'].replace('_', ' × ')})" if r["over"] != r["axis"] else ""
        if r["bytes"] is not None:
            sent = f"{r['bytes']:,.0f}"
        elif r["axis"] == "ep" and r["talkers"] > 1:
            sent = "none here: this GPT has no experts (the all-to-all comes with a mixture-of-experts model)"
        else:
            sent = "0"
        cells.append(
            f"<tr><td><b>{r['axis']}</b> {r['size']}</td><td>{html.escape(what)}{over}</td>"
            f"<td>{links}</td><td style='text-align:right'>{sent}</td></tr>"
        )
    return (
        "<table><tr><th>axis</th><th>groups (global ranks)</th><th>links on two servers of 4</th>"
        "<th>bytes a rank sends per step, at most</th></tr>" + "".join(cells) + "</table>"
    )


class MeshExplorer(StaticFallback, W.VBox):
    """Dropdowns for pp, dp, cp, ep and tp; the mesh they make of 8 ranks, drawn and tabled.
    `mesh`, `rows` and `figure` hold the last valid choice, `error` why the current one is not
    (or None). `select(pp=…, …)` sets the dropdowns from code. `model_args`, `m` and
    `batch_size`: the GPT and the step whose bytes are shown (a run's, to hold them to it)."""

    def __init__(
        self,
        pp: int = 2,
        dp: int = 1,
        cp: int = 2,
        ep: int = 1,
        tp: int = 2,
        *,
        model_args: dict | None = None,
        m: int = M,
        batch_size: int = BATCH,
    ):
        self.step = (tuple((model_args or GPT).items()), m, batch_size)
        choices = [1, 2, 4, 8]
        self.controls = {
            axis: W.Dropdown(options=choices, value=value, description=axis, style=WIDE, layout=BOX)
            for axis, value in zip(AXES, (pp, dp, cp, ep, tp))
        }
        self.status, self.table, self.plot = W.HTML(), W.HTML(), go.FigureWidget()
        self.mesh, self.rows, self.error, self.figure = None, None, None, go.Figure()
        self._quiet = False
        for w in self.controls.values():
            w.observe(lambda _: None if self._quiet else self.update(), names="value")
        super().__init__([W.HBox([W.VBox(list(self.controls.values())), self.status]), self.plot, self.table])
        self.update()

    def select(self, **axes: int) -> None:
        unknown = sorted(set(axes) - set(AXES))
        if unknown:
            raise ValueError(f"the mesh's axes are {', '.join(AXES)}; got {', '.join(unknown)}")
        self._quiet = True  # one update for the whole choice, not one per dropdown
        try:
            for axis, value in axes.items():
                self.controls[axis].value = value
        finally:
            self._quiet = False
        self.update()

    def update(self) -> None:
        c = {axis: w.value for axis, w in self.controls.items()}
        world = c["pp"] * c["dp"] * c["cp"] * c["tp"]
        try:
            if world != WORLD:
                raise ValueError(
                    f"pp·dp·cp·tp = {world}, not {WORLD}: the four make the world (ep is borrowed "
                    f"from dp × cp and adds no ranks)"
                )
            mesh = Mesh(c["pp"], dp=c["dp"], cp=c["cp"], ep=c["ep"], tp=c["tp"])
            sent = sent_by_rank(mesh.pp, mesh.dp, mesh.cp, mesh.tp, *self.step)
        except ValueError as e:  # the mesh's or the run's own words: what to choose instead
            self.error = str(e)
            self.status.value = note_html("Not a mesh this GPT runs on 8 ranks.", html.escape(self.error))
            return
        self.error, self.mesh = None, mesh
        self.rows = axis_rows(mesh, sent)
        self.figure = groups_figure(mesh, self.rows)
        with self.plot.batch_update():
            self.plot.data = []
            self.plot.add_traces(list(self.figure.data))
            self.plot.layout = self.figure.layout
        self.table.value = rows_html(self.rows)
        gpt, m, batch = dict(self.step[0]), self.step[1], self.step[2]
        self.status.value = note_html(
            mesh.describe(),
            f"a GPT of {gpt['depth']} blocks, width {gpt['width']}, "
            f"{gpt['block']} tokens; 1F1B, {batch} sequences in m = {m} micro-batches",
            colour=OKABE_ITO["green"],
        )

    # what an exported page shows
    def static_figures(self) -> list:
        return [self.figure]

    def static_html(self) -> str:
        return super().static_html() + rows_html(self.rows or [])

    def static_state(self) -> tuple:
        return (self.figure,)
