"""The widgets in Python (no browser): a control changes the figure as the engine says it should,
bad settings show the engine's message, RunExplorer turns a run (or its failure) into a picture."""

import statistics
import threading

import pytest

from minipipe import make_schedule, simulate
from minipipe.sim.measured_costs import calibrate
from minipipe.viz import RunExplorer, ScheduleExplorer, timeline
from tests.support.widgets import FakeRunner, fake_result, run_explorer


def bar_count(explorer, op=None):
    return sum(len(t.x) for t in explorer.figure.data if t.visible and (op is None or t.meta["op"] == op))


def drawn(explorer):
    """(op, chunk) -> (base, x) lists of the visible traces of the explorer's figure."""
    return {(t.meta["op"], t.meta["chunk"]): (list(t.base), list(t.x)) for t in explorer.figure.data if t.visible}


def test_m_from_4_to_8_doubles_the_forward_bars():
    ex = ScheduleExplorer(kind="1f1b", p=4, m=4)
    assert bar_count(ex, "F") == 16
    ex.controls["m"].value = 8
    assert bar_count(ex, "F") == 32 and bar_count(ex, "B") == 32
    assert "m=8" in ex.figure.layout.title.text


def test_the_widget_draws_what_timeline_draws():
    ex = ScheduleExplorer(kind="interleaved", p=2, m=4, v=2)
    reference = {(t.meta["op"], t.meta["chunk"]): (list(t.base), list(t.x)) for t in timeline(ex.trace).data}
    assert drawn(ex) == reference
    ex.controls["m"].value = 6
    reference = {(t.meta["op"], t.meta["chunk"]): (list(t.base), list(t.x)) for t in timeline(ex.trace).data}
    assert drawn(ex) == reference and ex.trace.schedule.m == 6
    assert ex.figure.layout.title.text == timeline(ex.trace).layout.title.text


def test_a_cost_change_sends_only_the_bars_it_moves_and_the_figure_stays_right(monkeypatch):
    ex = ScheduleExplorer(kind="1f1b", p=4, m=8)
    sent = []
    update = type(ex.figure).plotly_update

    def recording(figure, restyle_data=None, relayout_data=None, **kw):
        sent.append(set(restyle_data))
        return update(figure, restyle_data=restyle_data, relayout_data=relayout_data, **kw)

    monkeypatch.setattr(type(ex.figure), "plotly_update", recording)

    def fresh():
        return {
            (t.meta["op"], t.meta["chunk"]): (list(t.base), list(t.x), list(t.hovertext), list(t.y))
            for t in timeline(ex.trace).data
        }

    def shown():
        return {
            (t.meta["op"], t.meta["chunk"]): (list(t.base), list(t.x), list(t.hovertext), list(t.y))
            for t in ex.figure.data
            if t.visible
        }

    for forward, kind in ((1.5, "1f1b"), (1.0, "1f1b"), (1.5, "gpipe"), (1.5, "1f1b")):
        ex.controls["forward"].value = forward
        ex.controls["kind"].value = kind
        assert shown() == fresh()
        assert ex.figure.layout.title.text == timeline(ex.trace).layout.title.text
    assert sent[0] == {"base", "x", "hovertext"}  # rows, labels and names stayed: not sent again


def test_p_changes_the_rows():
    ex = ScheduleExplorer(kind="gpipe", p=2, m=4)
    ex.controls["p"].value = 6
    assert list(ex.figure.layout.yaxis.tickvals) == list(range(6))
    assert {y for t in ex.figure.data if t.visible for y in t.y} == set(range(6))
    assert ex.figure.layout.height > 200


def test_slow_stage_stretches_that_stage_only():
    ex = ScheduleExplorer(kind="1f1b", p=3, m=4, forward=1.0, backward=2.0)
    ex.controls["slow_stage"].value = 1
    ex.controls["slowdown"].value = 2.5
    durations = {}
    for e in ex.trace.events:
        durations.setdefault((e.action.op, e.action.stage), set()).add(round(e.duration, 9))
    assert durations[("F", 1)] == {2.5} and durations[("B", 1)] == {5.0}
    assert durations[("F", 0)] == {1.0} and durations[("B", 2)] == {2.0}
    forward = drawn(ex)[("F", 0)][1]
    assert sorted(set(round(x, 9) for x in forward)) == [1.0, 2.5]


def test_latency_and_costs_lengthen_the_step():
    ex = ScheduleExplorer(kind="1f1b", p=4, m=8)
    before = ex.trace.makespan
    ex.controls["latency"].value = 0.5
    assert ex.trace.makespan > before
    assert ex.figure.layout.xaxis.range[1] >= ex.trace.makespan


def test_v_only_applies_to_interleaved():
    ex = ScheduleExplorer(kind="1f1b", p=2, m=4, v=3)
    assert ex.controls["v"].disabled and ex.trace.schedule.v == 1 and ex.error is None
    ex.controls["kind"].value = "interleaved"
    assert not ex.controls["v"].disabled and ex.trace.schedule.v == 3
    assert {chunk for op, chunk in drawn(ex)} == {0, 1, 2}
    assert ex.controls["slow_stage"].max == 2 * 3 - 1  # stages 0 .. p*v - 1
    ex.controls["kind"].value = "gpipe"
    assert {chunk for op, chunk in drawn(ex)} == {0}  # chunk slots hidden again


@pytest.mark.parametrize(
    "settings,expected",
    [
        (dict(kind="interleaved", p=4, m=6, v=2), "interleaved"),  # m not a multiple of p
        (dict(kind="interleaved", p=4, m=8, v=1), "interleaved"),  # v=1 is plain 1F1B
    ],
)
def test_invalid_settings_show_the_engines_message(settings, expected):
    ex = ScheduleExplorer(kind="1f1b", p=4, m=8)
    with pytest.raises(ValueError) as engine:
        make_schedule(settings["kind"], settings["p"], settings["m"], settings["v"])
    ex.controls["v"].value = settings["v"]
    ex.controls["m"].value = settings["m"]  # still valid for 1F1B
    last_title = ex.figure.layout.title.text
    ex.controls["kind"].value = settings["kind"]  # no exception escapes
    assert ex.error == str(engine.value)
    assert expected in ex.error
    shown = ex.message.value.replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">")
    assert str(engine.value) in shown
    assert ex.figure.layout.title.text == last_title  # the last valid picture stays
    ex.controls["m"].value = 8  # fixing it clears the message
    if settings["v"] == 1:
        ex.controls["v"].value = 2
    assert ex.error is None and ex.message.value == ""
    assert "interleaved" in ex.figure.layout.title.text


def test_update_is_fast_at_classroom_size():
    """The issue's target: well under 100 ms per change at p <= 8, m <= 32 (kernel side; see
    benchmarks/explorer_speed.py for the full table)."""
    ex = ScheduleExplorer(kind="interleaved", p=8, m=32, v=2)
    times = []
    for i in range(7):
        ex.controls["forward"].value = 1.0 + 0.1 * (i % 2 + 1)
        assert ex.error is None
        times.append(ex.last_update_ms)
    assert statistics.median(times) < 100


def test_run_shows_measured_beside_simulated_with_both_bubbles():
    runner = FakeRunner()
    ex = run_explorer(runner, kind="1f1b", p=2, m=4, steps=3)
    assert ex.run_button.description == "Run on 2 processes"
    ex.run()
    assert runner.calls == [dict(schedule="1f1b", p=2, m=4, v=1, model="mlp", steps=3, timeout=60.0)]
    assert ex.run_error is None and ex.result is not None
    measured = ex.result.traces[-1]
    simulated = simulate(measured.schedule, calibrate(measured))
    text = ex.run_message.value
    assert f"measured {100 * measured.bubble():.1f}%" in text
    assert f"simulated {100 * simulated.bubble():.1f}%" in text and "textbook" in text
    assert "loss: 2.0000 → 1.8000 over 3 steps" in text
    fig = ex.run_box.children[0]
    actions = [t for t in fig.data if t.meta["kind"] == "action"]
    assert sum(len(t.x) for t in actions) == 2 * len(measured.events)  # both timelines, all bars
    assert {t.xaxis for t in actions} == {"x", "x2"}
    assert [t for t in fig.data if t.meta["kind"] == "wait"]  # measured waits shown
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("simulated") and titles[1].startswith("measured on 2 processes, step 3 of 3")
    assert ex.progress.value == ex.progress.max == 3 and ex.progress.bar_style == "success"
    assert not ex.run_button.disabled


def test_run_failure_is_shown_not_raised():
    runner = FakeRunner(fail=RuntimeError("rank 1 failed in step 0 at action 1F2: boom"))
    ex = run_explorer(runner, p=2, m=4, steps=2)
    ex.run()
    assert "RuntimeError: rank 1 failed in step 0 at action 1F2: boom" in ex.run_message.value
    assert ex.run_error.startswith("RuntimeError: rank 1")
    assert ex.progress.bar_style == "danger" and not ex.run_button.disabled and ex.result is None


def test_invalid_schedule_never_starts_a_run():
    runner = FakeRunner()
    ex = run_explorer(runner, kind="interleaved", p=4, m=8, v=2)
    ex.controls["m"].value = 6
    ex.run()
    assert runner.calls == []
    assert "multiple of p" in ex.run_message.value and "nothing started" in ex.run_message.value


def test_run_in_the_background_reports_progress():
    release = threading.Event()
    seen = []

    def runner(config, progress=None):
        progress({"kind": "started", "pids": [11, 12]})
        progress({"kind": "step", "job": 0, "step": 0, "loss": 0.5})
        seen.append(ex.progress.value)
        release.wait(10)
        return fake_result(config)

    ex = RunExplorer(runner=runner, config_factory=dict, p=2, m=2, steps=2)
    thread = ex.run()
    assert thread is not None and ex.run_button.disabled
    assert ex.run() is None  # a second click while running does nothing
    release.set()
    ex.wait(10)
    assert not thread.is_alive()
    assert seen == [1] and ex.progress.value == 2 and ex.run_error is None
    assert "finished" in ex.run_status.value and not ex.run_button.disabled


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_real_run_through_the_launcher():
    ex = RunExplorer(kind="1f1b", p=2, m=4, steps=2, background=False)
    ex.run()
    assert ex.run_error is None, ex.run_error
    measured = ex.result.traces[-1]
    assert measured.source == "measured" and len(measured.events) == 2 * 2 * 4
    assert f"measured {100 * measured.bubble():.1f}%" in ex.run_message.value
    fig = ex.run_box.children[0]
    assert sum(len(t.x) for t in fig.data if t.meta["kind"] == "action") == 2 * len(measured.events)
