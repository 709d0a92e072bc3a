"""Drag a memory cap, watch the best schedule under it: the search (schedule/search.py) run for a
few caps, its timeline and bubble for the chosen one.

    CapExplorer(p=4, m=8, costs=Costs(forward=1, backward=2, weight=1), caps=(1, 1.5, 2, 3, 4))

The searches run once, when the widget is made (or are given: `found`, cap -> search's Found)
(a fraction of a second each at p = 4, m = 8); the slider then only redraws. The exported page
gets `cap_figure`: the same timelines in one plotly figure with its own slider, which moves in a
page with no kernel and no network.
"""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from ..schedule.ops import OPS
from ..schedule.search import Found, search
from ..sim.pipeline import simulate
from .bars import action_bars
from .offline import StaticFallback
from .timeline import timeline_layout

SLOTS = [(op, chunk) for op in OPS for chunk in range(2)]  # fixed traces: every frame has the same bars


def searched(p: int, m: int, costs, caps, exact: bool | str = False) -> dict[float, Found]:
    """The search's best under each cap."""
    return {cap: search(p, m, costs, cap, exact=exact) for cap in caps}


def caption(cap: float, found: Found, costs) -> str:
    trace = simulate(found.schedule, costs)
    return (
        f"cap {cap:g} micro-batches a rank → {found.how}: step {found.makespan:g}, bubble "
        f"{trace.bubble():.1%}, holding at most {max(found.peak):g}"
    )


def cap_figure(found: dict[float, Found], costs) -> go.Figure:
    """Every cap's best schedule in one figure, a slider to choose the cap (no kernel needed)."""
    caps = list(found)
    traces = {cap: simulate(f.schedule, costs) for cap, f in found.items()}
    longest = max(traces.values(), key=lambda t: t.makespan)
    layout = timeline_layout(longest, title=caption(caps[0], found[caps[0]], costs), theory=False)
    layout["xaxis"]["range"] = [0, longest.makespan * 1.02]  # one time axis for every cap

    def title(cap):
        return dict(text=caption(cap, found[cap], costs), x=0.01, xanchor="left")

    frames = [
        go.Frame(
            name=f"{cap:g}",
            data=action_bars(traces[cap], slots=SLOTS),
            layout=dict(title=title(cap), yaxis=timeline_layout(traces[cap], theory=False)["yaxis"]),
        )
        for cap in caps
    ]  # each rank's idle share, on its row's label, is the shown cap's
    steps = [
        dict(
            method="animate",
            label=f"{cap:g}",
            args=[
                [f"{cap:g}"],
                dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0)),
            ],
        )
        for cap in caps
    ]
    layout.update(
        title=title(caps[0]),
        yaxis=timeline_layout(traces[caps[0]], theory=False)["yaxis"],
        margin=dict(l=70, r=20, t=70, b=130),
        height=layout["height"] + 80,
        sliders=[
            dict(
                active=0,
                steps=steps,
                y=-0.3,
                len=0.9,
                x=0.05,
                currentvalue=dict(prefix="memory cap, micro-batches a rank: "),
            )
        ],
    )
    return go.Figure(data=action_bars(traces[caps[0]], slots=SLOTS), layout=layout, frames=frames)


class CapExplorer(StaticFallback, W.VBox):
    """A slider over memory caps and the timeline of the best schedule the search finds under it.
    Attributes: `found` (cap -> Found), `slider`, `figure`, `trace` (the shown cap's)."""

    def __init__(
        self,
        p: int = 4,
        m: int = 8,
        costs=None,
        caps=(1, 1.5, 2, 3, 4),
        *,
        exact: bool | str = False,
        found: dict | None = None,
    ):
        from ..sim.costs import Costs

        self.costs = costs if costs is not None else Costs(forward=1.0, backward=2.0, weight=1.0)
        self.found = {cap: found[cap] for cap in caps} if found is not None else searched(p, m, self.costs, caps, exact)
        self.slider = W.SelectionSlider(
            options=[(f"{c:g}", c) for c in caps],
            value=caps[-1],
            description="memory cap",
            style={"description_width": "110px"},
            layout=W.Layout(width="520px"),
        )
        self.slider.add_class("minipipe-cap")
        self.status = W.HTML()
        self.figure_box = W.Box(layout=W.Layout(display="block", width="100%"))
        self._picture = cap_figure(self.found, self.costs)
        super().__init__([self.slider, self.status, self.figure_box])
        self.slider.observe(lambda change: self.show(change["new"]), names="value")
        self.show(caps[-1])

    def show(self, cap: float) -> None:
        found = self.found[cap]
        self.trace = simulate(found.schedule, self.costs)
        self.figure = go.FigureWidget(
            data=action_bars(self.trace, slots=SLOTS),
            layout=timeline_layout(self.trace, title=caption(cap, found, self.costs), theory=False),
        )
        self.figure_box.children = [self.figure]
        self.status.value = (
            f"<span style='font-size:12px'>{found.how}; the hand-written kinds that fit: "
            + (
                ", ".join(
                    f"{t.name} {t.makespan:g}"
                    for t in found.tried
                    if t.fits and not t.name.startswith(("heuristic", "optimum", "MILP"))
                )
                or "none"
            )
            + "</span>"
        )

    def static_figures(self) -> list:
        return [self._picture]

    def static_html(self) -> str:
        """The picture, its frames not played on load (plotly plays a figure's frames once by default)."""
        import plotly.io as pio

        return pio.to_html(
            self._picture,
            include_plotlyjs=False,
            include_mathjax=False,
            full_html=False,
            validate=False,
            auto_play=False,
            config={"displaylogo": False},
        )

    def static_state(self) -> tuple:
        return (self._picture,)
