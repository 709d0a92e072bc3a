"""Schedules are compared on the same model everywhere a learner compares them: with uniform
costs (a rank's share f=1, b=2) at p=4, m=8, interleaved v=2 takes 28.5 and 1F1B 33."""

import re

import pytest

from minipipe import Costs, make_schedule, simulate

EXPECTED = {"1f1b": 33.0, "interleaved": 28.5}


def test_simulate():
    for kind, span in EXPECTED.items():
        assert simulate(make_schedule(kind, 4, 8), Costs(forward=1.0, backward=2.0)).makespan == span


def test_cli(capsys):
    from minipipe.cli import main

    for kind, span in EXPECTED.items():
        assert main(["simulate", "-s", kind, "-p", "4", "-m", "8"]) == 0
        assert re.search(rf"makespan {span:.3f} ms", capsys.readouterr().out)


def test_compare_figure():
    pytest.importorskip("plotly")
    from minipipe.viz import compare

    fig = compare([simulate(make_schedule(kind, 4, 8)) for kind in EXPECTED])
    titles = [a.text for a in fig.layout.annotations]
    assert "makespan 33 ms" in titles[0] and "makespan 28.5 ms" in titles[1]
    assert fig.layout.xaxis.range[1] == pytest.approx(33 * 1.01)  # one shared axis, as long as the longest


def test_explorer():
    pytest.importorskip("ipywidgets")
    from minipipe.viz import ScheduleExplorer

    explorer = ScheduleExplorer(kind="1f1b", p=4, m=8)
    assert explorer.trace.makespan == 33.0
    explorer.controls["kind"].value = "interleaved"
    assert explorer.trace.schedule.v == 2 and explorer.trace.makespan == 28.5
