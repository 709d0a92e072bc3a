"""RunExplorer: the ScheduleExplorer (widgets.py) plus "Run on p processes", a real run through the
launcher, its measured timeline drawn beside a simulation of the same schedule on the measured op costs.

The run happens on a background thread, so the kernel stays responsive and the progress bar moves; the
engine (which imports torch.distributed) is imported only when a run starts. Any error from the run is
shown in the widget, never raised into the kernel.
"""

from __future__ import annotations

import html
import os
import threading
import time
from collections.abc import Callable

import ipywidgets as W
import plotly.graph_objects as go

from ..schedule.kinds import make_schedule
from ..sim.measured_costs import calibrate
from ..sim.pipeline import simulate
from .style import OKABE_ITO
from .timeline import compare, theory_bubble
from .widgets import BOX, FIGURE_WIDTH, WIDE, ScheduleExplorer, note_html


class RunExplorer(ScheduleExplorer):
    """ScheduleExplorer plus "Run on p processes": a real run through the launcher.

    The run happens on a background thread (the kernel stays responsive, the progress bar
    moves); then the measured timeline of the last step is drawn on one time axis with a
    simulation of the same schedule whose per-stage F/B/W costs are the means measured in that
    step. The difference between the two is communication and overhead. Any error from the run
    is shown in the widget (and kept in `run_error`).

    runner: called as runner(config, progress=callback) -> result with .traces (measured, one
        per step), .losses, .config. Default: minipipe.engine.launch.run (imported on first use).
    config_factory: builds the config from keyword arguments schedule, p, m, v, model, steps,
        timeout. Default: minipipe.engine.config.RunConfig.
    background: run on a thread (True) or in the calling thread (False: simpler to test).
    """

    def __init__(
        self,
        *,
        runner: Callable | None = None,
        config_factory: Callable | None = None,
        model: str = "mlp",
        steps: int = 3,
        timeout: float = 60.0,
        background: bool = True,
        **kwargs,
    ):
        self.runner, self.config_factory, self.background, self.timeout = runner, config_factory, background, timeout
        slider = dict(style=WIDE, layout=BOX)
        self.run_controls = dict(
            model=W.Dropdown(options=["mlp", "gpt"], value=model, description="model", **slider),
            steps=W.IntSlider(value=steps, min=1, max=20, description="training steps", **slider),
        )
        self.run_button = W.Button(
            description="Run", button_style="primary", icon="play", layout=W.Layout(width="240px")
        )
        self.run_button.add_class("minipipe-run")
        self.run_button.on_click(lambda _: self.run())
        self.progress = W.IntProgress(value=0, min=0, max=steps, layout=W.Layout(width="240px"))
        self.run_status = W.HTML()
        self.run_message = W.HTML()
        self.run_box = W.Box([], layout=W.Layout(display="block", width="100%"))
        self.result = None
        self.run_error: str | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        super().__init__(**kwargs)
        self.controls["p"].observe(lambda _: self._label_button(), names="value")
        self._label_button()

    def _children(self) -> list:
        run_row = W.HBox(
            [W.VBox(list(self.run_controls.values())), W.VBox([self.run_button, self.progress, self.run_status])]
        )
        return super()._children() + [run_row, self.run_message, self.run_box]

    def static_figures(self) -> list:
        return super().static_figures() + [w for w in self.run_box.children if isinstance(w, go.FigureWidget)]

    def static_state(self) -> tuple:
        return super().static_state() + tuple(self.run_box.children)

    def _label_button(self) -> None:
        p = self.controls["p"].value
        self.run_button.description = f"Run on {p} process{'es' if p > 1 else ''}"
        cores = os.cpu_count() or 1
        self.run_button.tooltip = (
            f"this machine has {cores} CPU cores; with p > {cores} the ranks share cores and every time stretches"
            if p > cores
            else ""
        )

    # -- running -----------------------------------------------------------------------------
    def run(self) -> threading.Thread | None:
        """Start a run with the current settings (the button does this). Returns the thread, if any."""
        if self._running:
            return None
        s = self.settings()
        try:
            make_schedule(s["kind"], s["p"], s["m"], s["v"])  # a bad schedule never starts processes
        except ValueError as e:
            self._fail("Not a valid pipeline, nothing started.", str(e))
            return None
        config = dict(
            schedule=s["kind"],
            p=s["p"],
            m=s["m"],
            v=s["v"],
            model=self.run_controls["model"].value,
            steps=self.run_controls["steps"].value,
            timeout=self.timeout,
        )
        self._running, self.result, self.run_error = True, None, None
        self.run_button.disabled = True
        self.progress.max, self.progress.value, self.progress.bar_style = config["steps"], 0, "info"
        self.run_message.value = ""
        self._started = time.perf_counter()
        self._progress_text = f"starting {s['p']} processes"
        self._show_status()
        if not self.background:
            self._run(config)
            return None
        self._thread = threading.Thread(target=self._run, args=(config,), name="minipipe-run", daemon=True)
        self._thread.start()
        threading.Thread(target=self._tick, name="minipipe-run-clock", daemon=True).start()
        return self._thread

    def wait(self, timeout: float | None = None) -> None:
        """Block until the current run (if any) has finished."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, config: dict) -> None:
        try:
            runner, factory = self.runner, self.config_factory
            if runner is None or factory is None:
                from ..engine.config import RunConfig  # the engine imports torch.distributed: only now
                from ..engine.launch import run

                runner, factory = runner or run, factory or RunConfig
            result = runner(factory(**config), progress=self._on_progress)
            self._show_result(result)
        except Exception as e:  # a widget shows the error; it never raises into the kernel
            self._fail("The run failed.", f"{type(e).__name__}: {e}")
        finally:
            self._running = False
            self.run_button.disabled = False
            self._show_status()

    def _tick(self) -> None:
        while self._running:
            self._show_status()
            time.sleep(0.5)

    def _show_status(self) -> None:
        elapsed = time.perf_counter() - self._started
        state = "running" if self._running else "finished"
        self.run_status.value = (
            f'<span style="font-size:12px">{state} · {elapsed:.1f} s · {html.escape(self._progress_text)}</span>'
        )

    def _on_progress(self, event=None, *args, **kwargs) -> None:
        """Progress from the launcher: {"kind": "started", "pids": [...]} or {"kind": "step",
        "step": k, "loss": x}. Anything else is shown as text."""
        info = event if isinstance(event, dict) else dict(kwargs)
        if info.get("kind") == "started":
            self._progress_text = f"{len(info.get('pids', []))} processes started"
        elif "step" in info:
            done = int(info["step"]) + 1
            self.progress.value = min(done, self.progress.max)
            loss = f", loss {info['loss']:.4f}" if isinstance(info.get("loss"), (int, float)) else ""
            self._progress_text = f"step {done} of {self.progress.max} done{loss}"
        elif event is not None:
            self._progress_text = str(event)[:120]
        self._show_status()

    def _fail(self, title: str, text: str) -> None:
        self.run_error = text
        self.progress.bar_style = "danger"
        self.run_message.value = note_html(title, text)

    def _show_result(self, result) -> None:
        if not getattr(result, "traces", None):
            raise ValueError("the run returned no measured traces (was tracing switched off?)")
        measured = result.traces[-1]
        simulated = simulate(measured.schedule, calibrate(measured))
        losses = list(getattr(result, "losses", []) or [])
        step = (measured.step if measured.step is not None else len(result.traces) - 1) + 1
        total = max(len(losses), len(result.traces), step)
        labels = [
            "simulated with the measured op costs, free communication",
            f"measured on {measured.p} processes, step {step} of {total}",
        ]
        picture = compare([simulated, measured], labels)
        fig = go.FigureWidget(
            data=[t.to_plotly_json() for t in picture.data],
            layout=dict(picture.layout.to_plotly_json(), width=FIGURE_WIDTH),
            _validate=False,
        )
        old = self.run_box.children
        self.run_box.children = [fig]
        for widget in old:
            widget.close()
        theory = theory_bubble(measured)
        lines = [
            f"bubble: measured {100 * measured.bubble():.1f}% · simulated {100 * simulated.bubble():.1f}%"
            + (f" · textbook {100 * theory:.1f}%" if theory is not None else ""),
            f"makespan: measured {measured.makespan:.2f} {measured.unit} · simulated "
            f"{simulated.makespan:.2f} {simulated.unit}",
        ]
        if measured.waits:
            lines.append(
                "waiting on communication per rank: "
                + ", ".join(f"{measured.wait_time(r):.2f}" for r in range(measured.p))
                + f" {measured.unit}"
            )
        if losses:
            lines.append(f"loss: {losses[0]:.4f} → {losses[-1]:.4f} over {len(losses)} steps")
        self.result = result
        self.progress.value, self.progress.bar_style = self.progress.max, "success"
        self.run_message.value = note_html("Run finished.", "\n".join(lines), colour=OKABE_ITO["green"])
