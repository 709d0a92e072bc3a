"""A RunExplorer with an injected runner: runs made from a simulation, no processes
(tests/viz/test_viz_widgets.py, and the widget notebook tests/course/test_browser_export.py executes)."""

from minipipe import Action, Event, Trace, Wait, make_schedule, simulate
from minipipe.viz import RunExplorer


# -- RunExplorer with an injected runner ---------------------------------------------------
def fake_result(config, offset=500.0):
    """What the launcher returns, made from a simulation: traces labelled measured, with waits."""
    schedule = make_schedule(config["schedule"], config["p"], config["m"], config["v"])
    traces = []
    for step in range(config["steps"]):
        sim = simulate(schedule)
        events = [Event(e.rank, e.action, offset + e.start * 1.1, offset + e.end * 1.1) for e in sim.events]
        waits = [Wait(1, "recv", Action("F", 0, 0), offset, offset + 1.0, 0)] if schedule.p > 1 else []
        traces.append(Trace(schedule, events, source="measured", waits=waits, step=step))

    class Result:
        pass

    result = Result()
    result.config, result.traces, result.losses = config, traces, [2.0 - 0.1 * s for s in range(config["steps"])]
    return result


class FakeRunner:
    def __init__(self, fail: Exception | None = None):
        self.calls, self.fail = [], fail

    def __call__(self, config, progress=None):
        self.calls.append(config)
        progress({"kind": "started", "pids": [1, 2]})
        for step in range(config["steps"]):
            progress({"kind": "step", "job": 0, "step": step, "loss": 1.0})
        if self.fail:
            raise self.fail
        return fake_result(config)


def run_explorer(runner, **kw):
    return RunExplorer(runner=runner, config_factory=dict, background=False, **kw)
