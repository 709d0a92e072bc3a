"""A widget for the layout comparison: choose the model size, m and the number of processes, press
Run, and every layout that fits is measured (minipipe.compare) and drawn (viz.layouts).

    from minipipe.viz.compare_widget import LayoutExplorer
    LayoutExplorer()

The runs happen on a background thread, so the kernel stays responsive; errors are shown in the
widget. In an exported page the last figure is shown as a picture (offline.StaticFallback).
"""

from __future__ import annotations

import html
import threading
import time

import ipywidgets as W
import plotly.graph_objects as go

from .layouts import layouts_figure
from .offline import StaticFallback
from .style import OKABE_ITO
from .widgets import BOX, FIGURE_WIDTH, WIDE, note_html


class LayoutExplorer(StaticFallback, W.VBox):
    """Controls for compare(): world, model width and depth, m. `rows` holds the last results,
    `error` the last failure (or None), `figure` the last picture."""

    def __init__(
        self,
        world: int = 4,
        width: int = 32,
        depth: int = 4,
        m: int = 4,
        steps: int = 3,
        background: bool = True,
        runner=None,
    ):
        slider = dict(style=WIDE, layout=BOX)
        self.controls = dict(
            world=W.Dropdown(options=[2, 4, 8], value=world, description="processes", **slider),
            width=W.Dropdown(options=[16, 32, 64, 128], value=width, description="GPT width", **slider),
            depth=W.IntSlider(value=depth, min=2, max=8, description="GPT blocks", **slider),
            m=W.Dropdown(options=[1, 2, 4, 8], value=m, description="m  micro-batches", **slider),
        )
        self.steps, self.background, self.runner = steps, background, runner
        self.button = W.Button(
            description="Run every layout", button_style="primary", icon="play", layout=W.Layout(width="240px")
        )
        self.button.on_click(lambda _: self.run())
        self.status = W.HTML()
        self.output = W.Output()
        self.rows, self.error, self.figure = None, None, go.Figure()
        self._thread = None
        super().__init__([W.VBox(list(self.controls.values())), W.HBox([self.button, self.status]), self.output])

    def settings(self) -> dict:
        c = {k: w.value for k, w in self.controls.items()}
        heads = 4 if c["width"] % 4 == 0 else 2
        return dict(
            world=c["world"],
            model="gpt",
            m=c["m"],
            steps=self.steps,
            batch_size=8 * c["m"],
            model_args=dict(width=c["width"], depth=c["depth"], heads=heads, block=16, vocab=32),
        )

    def run(self):
        """Measure every layout with the current settings (the button does this)."""
        if self._thread is not None and self._thread.is_alive():
            return None
        self.button.disabled, self.error = True, None
        self._started = time.perf_counter()
        self.status.value = "running every layout …"
        if not self.background:
            self._run(self.settings())
            return None
        self._thread = threading.Thread(target=self._run, args=(self.settings(),), daemon=True)
        self._thread.start()
        return self._thread

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, settings: dict) -> None:
        try:
            from ..compare import compare, configs, table

            world = settings.pop("world")
            _, skipped = configs(world, **settings)
            self.rows = (self.runner or compare)(world, **settings)
            self.figure = layouts_figure(self.rows)
            self.output.clear_output(wait=True)
            with self.output:
                from IPython.display import display

                display(go.FigureWidget(self.figure, layout=dict(width=FIGURE_WIDTH)))
                print(table(self.rows, skipped))
            self.status.value = note_html(
                "Done.",
                f"{len(self.rows)} layouts in {time.perf_counter() - self._started:.0f} s",
                colour=OKABE_ITO["green"],
            )
        except Exception as e:  # a widget shows the error; it never raises into the kernel
            self.error = f"{type(e).__name__}: {e}"
            self.status.value = note_html("The runs failed.", html.unescape(self.error))
        finally:
            self.button.disabled = False

    # what an exported page shows
    def static_figures(self) -> list:
        return [self.figure] if self.rows else []

    def static_state(self) -> tuple:
        return (self.figure,)
