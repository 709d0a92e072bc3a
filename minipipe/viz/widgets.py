"""ScheduleExplorer, the dashboard that drives the simulator: move a slider, the pipeline is
re-simulated and redrawn (schedule kind, p, m, v, op costs, latency, one slow stage -> timeline);
and what the course's other widgets share with it: the controls' sizes, the figure's width, the
message box. RunExplorer (run_explorer.py) adds a real run through the launcher.

The timeline lives in a `go.FigureWidget` (plotly's widget; it needs `anywidget`). It keeps one
bar trace per (op, chunk) slot for every chunk a slider allows, so a change is one
`plotly_update` message that restyles those traces and relayouts the title and axes, not a new
plot. That keeps an update (simulate + redraw) at a few ms kernel-side for classroom sizes
(benchmarks/explorer_speed.py measures it).

Bad settings never raise out of a widget: the engine's message is shown above the figure,
which keeps the last valid picture.
"""

from __future__ import annotations

import functools
import html
import time

import ipywidgets as W
import plotly.graph_objects as go

from ..schedule import kinds
from ..schedule.ir import Schedule
from ..schedule.kinds import make_schedule
from ..schedule.ops import OPS
from ..sim.costs import Costs
from ..sim.pipeline import simulate
from ..trace import Trace
from .bars import action_bars
from .offline import StaticFallback
from .style import OKABE_ITO, TEMPLATE
from .timeline import BASE_PX, timeline_layout

MAX_P, MAX_M, MAX_V = 8, 32, 4
# Plotly's widget sizes its plot once, when it is created, and falls back to 700 px wide when
# its output area has no size yet; a fixed width, as wide as the two columns of controls above
# it, is predictable.
FIGURE_WIDTH = 860
SLOTS = [(op, chunk) for op in OPS for chunk in range(MAX_V)]  # fixed traces of the widget
WIDE = dict(description_width="150px")
BOX = W.Layout(width="420px")


def note_html(title: str, text: str, colour: str = OKABE_ITO["vermillion"]) -> str:
    """A message box in the theme's own text colour (readable light and dark), with a coloured edge."""
    return (
        f'<div style="border-left:4px solid {colour};padding:2px 10px;margin:4px 0">'
        f'<b>{html.escape(title)}</b><pre style="white-space:pre-wrap;margin:2px 0;font-size:12px">'
        f"{html.escape(text)}</pre></div>"
    )


def uses_v(kind: str) -> bool:
    """Whether this kind takes v (stages per rank); the others run with v = 1."""
    try:
        return kinds.get(kind).takes_v
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def cached_schedule(kind: str, p: int, m: int, v: int) -> Schedule:
    """make_schedule, remembered: moving a cost slider must not regenerate and re-validate the
    same schedule (a Schedule is immutable, so sharing it is safe). Errors are not cached."""
    return make_schedule(kind, p, m, v)


def empty_figure() -> go.FigureWidget:
    layout = dict(template=TEMPLATE, height=BASE_PX, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return go.FigureWidget(data=[], layout=layout, _validate=False)


class ScheduleExplorer(StaticFallback, W.VBox):
    """Sliders for a schedule and its costs; every change re-simulates and redraws.

    Useful attributes: `controls` (name -> widget: kind, p, m, v, forward, backward, weight,
    latency, slow_stage, slowdown), `figure` (the FigureWidget), `trace` (the last simulated
    Trace), `error` (the engine's message when the settings are invalid, else None),
    `last_update_ms`. Call `update()` to redraw by hand.
    """

    def __init__(
        self,
        kind: str = "1f1b",
        p: int = 4,
        m: int = 8,
        v: int = 2,
        forward: float = 1.0,
        backward: float = 2.0,
        weight: float = 1.0,
        latency: float = 0.0,
        slow_stage: int = 0,
        slowdown: float = 1.0,
    ):
        self._hold = True  # no redraws while the controls are built
        kind = kinds.get(kind).name
        slider = dict(style=WIDE, layout=BOX)
        self.controls: dict[str, W.ValueWidget] = dict(
            kind=W.Dropdown(options=kinds.names(), value=kind, description="schedule", **slider),
            p=W.IntSlider(value=p, min=1, max=MAX_P, description="p  ranks", **slider),
            m=W.IntSlider(value=m, min=1, max=MAX_M, description="m  micro-batches", **slider),
            v=W.IntSlider(value=v, min=1, max=MAX_V, description="v  chunks per rank", **slider),
            forward=W.FloatSlider(value=forward, min=0.1, max=5, step=0.1, description="F  forward cost", **slider),
            backward=W.FloatSlider(value=backward, min=0.1, max=10, step=0.1, description="B  backward cost", **slider),
            weight=W.FloatSlider(
                value=weight,
                min=0.0,
                max=5,
                step=0.1,
                description="W  weight-grad part",
                tooltip="only for schedules that split backward into B and W",
                **slider,
            ),
            latency=W.FloatSlider(value=latency, min=0, max=3, step=0.05, description="latency per message", **slider),
            slow_stage=W.IntSlider(value=slow_stage, min=0, max=MAX_P * MAX_V - 1, description="slow stage", **slider),
            slowdown=W.FloatSlider(value=slowdown, min=1, max=4, step=0.1, description="slow stage ×", **slider),
        )
        for name, widget in self.controls.items():
            widget.add_class(f"minipipe-{name.replace('_', '-')}")  # stable hooks for the browser test
        self.status = W.HTML()
        self.message = W.HTML()
        self.figure = empty_figure()
        # a block box, not the default flex row, which would squeeze the plot
        self.figure_box = W.Box([self.figure], layout=W.Layout(display="block", width="100%"))
        self.figure_box.add_class("minipipe-explorer-figure")
        self.trace: Trace | None = None
        self.error: str | None = None
        self.last_update_ms = float("nan")
        self._drawn = False
        self._shown: dict = {}  # what the figure shows now (draw sends only changes)
        super().__init__(self._children())
        self.add_class("minipipe-explorer")
        for widget in self.controls.values():
            widget.observe(self._changed, names="value")
        self._hold = False
        self.update()

    def _children(self) -> list:
        c = self.controls
        left = W.VBox([c["kind"], c["p"], c["m"], c["v"], c["slow_stage"]])
        right = W.VBox([c["forward"], c["backward"], c["weight"], c["latency"], c["slowdown"]])
        return [W.HBox([left, right]), self.status, self.message, self.figure_box]

    # -- the picture an exported page shows (offline.StaticFallback) ---------------------------
    def static_figures(self) -> list:
        return [self.figure]

    def static_state(self) -> tuple:
        return (self.trace,)

    # -- reading the controls ----------------------------------------------------------------
    def settings(self) -> dict:
        values = {name: w.value for name, w in self.controls.items()}
        if not uses_v(values["kind"]):
            values["v"] = 1
        return values

    def costs(self, split_backward: bool = False) -> Costs:
        """The sliders' costs: F and B are a rank's share of the model, whatever v (simulate.Costs)."""
        s = self.settings()
        scale = {s["slow_stage"]: s["slowdown"]} if s["slowdown"] != 1 else {}
        return Costs(
            forward=s["forward"],
            backward=s["backward"],
            latency=s["latency"],
            stage_scale=scale,
            weight=s["weight"] if split_backward else None,
        )

    def _changed(self, change) -> None:
        if not self._hold:
            self.update()

    def _sync_controls(self) -> None:
        """Grey out what does not apply; keep the slow stage inside 0 .. p*v - 1."""
        s = self.settings()
        self._hold = True
        try:
            self.controls["v"].disabled = not uses_v(s["kind"])
            self.controls["slow_stage"].max = max(0, s["p"] * s["v"] - 1)
        finally:
            self._hold = False

    # -- simulate and draw -------------------------------------------------------------------
    def update(self) -> Trace | None:
        """Re-simulate with the current settings and redraw; returns the trace, or None (and
        shows the engine's message) when the settings are invalid."""
        start = time.perf_counter()
        self._sync_controls()
        s = self.settings()
        try:
            schedule = cached_schedule(s["kind"], s["p"], s["m"], s["v"])
            self.controls["weight"].disabled = not schedule.splits_backward()
            trace = simulate(schedule, self.costs(schedule.splits_backward()))
        except ValueError as e:  # ScheduleError is a ValueError too
            self.error = str(e)
            self.message.value = note_html(
                "Not a valid pipeline: the figure still shows the last valid one.", self.error
            )
            self.status.value = ""
            return None
        self.error = None
        self.message.value = ""
        self.trace = trace
        self.draw(trace)
        self.last_update_ms = 1000 * (time.perf_counter() - start)
        self.status.value = f'<span style="font-size:11px">simulated and redrawn in {self.last_update_ms:.0f} ms</span>'
        return trace

    def draw(self, trace: Trace) -> None:
        """Restyle the fixed slots and relayout, in one message to the browser."""
        if trace.schedule.v > MAX_V:
            raise ValueError(f"the explorer draws at most v={MAX_V} chunks per rank, got v={trace.schedule.v}")
        bars = action_bars(trace, slots=SLOTS)
        layout = timeline_layout(trace)
        keys = ("base", "x", "y", "ids", "text", "hovertext", "name", "visible")
        restyle = {key: [bar[key] for bar in bars] for key in keys}
        relayout = {
            "height": layout["height"],
            "title.text": layout["title"]["text"],
            "xaxis.range": layout["xaxis"]["range"],
            "xaxis.title.text": layout["xaxis"]["title"]["text"],
        }
        relayout.update({f"yaxis.{k}": layout["yaxis"][k] for k in ("tickvals", "ticktext", "range")})
        if not self._drawn:  # the first picture builds the widget's traces
            new = go.FigureWidget(data=bars, layout=dict(layout, width=FIGURE_WIDTH), _validate=False)
            self.figure.close()
            self.figure, self._drawn = new, True
            self.figure_box.children = [new]
        else:
            # only what changed: a cost slider moves the bars but leaves their rows, labels and
            # names as they were, and plotly compares every value it is given, element by element
            # in Python, before it sends it (most of an update's time when everything was sent)
            self.figure.plotly_update(
                restyle_data={k: v for k, v in restyle.items() if self._shown.get(k) != v},
                relayout_data={k: v for k, v in relayout.items() if self._shown.get(k) != v},
            )
        self._shown = {**restyle, **relayout}
