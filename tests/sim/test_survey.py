"""Every training kind at one (p, m), side by side (sim.survey, lesson 09's table): each row is the
simulator's figures for that kind, against 1F1B's; a kind that cannot run there says why."""

import pytest

from minipipe import Costs, make_schedule, simulate
from minipipe.schedule import kinds
from minipipe.sim.survey import survey, table

COSTS = Costs(forward=1.0, backward=2.0, weight=1.0)


# the second: each cost apart from Costs()'s defaults (the survey simulates on the costs it is given)
@pytest.mark.parametrize("costs", [COSTS, Costs(forward=1.5, backward=2.5, weight=0.75)])
def test_each_row_is_the_simulators_figures_against_1f1bs(costs):
    rows = {r.kind: r for r in survey(4, 6, costs)}
    assert "inference" not in rows  # forward-only kinds serve; they do not train
    one = simulate(make_schedule("1f1b", 4, 6), costs)
    for name, row in rows.items():
        if row.makespan is None:
            continue
        schedule = make_schedule(name, 4, 6)
        trace = simulate(schedule, costs)
        steps, v = schedule.steps, schedule.v
        assert (row.v, row.makespan, row.bubble) == (v, trace.makespan / steps, trace.bubble()), name
        assert row.idle == max(trace.idle(r) for r in range(4)) / steps, name
        assert row.peak == max(trace.peak_inflight()) / v, name
        assert row.time_vs_1f1b == pytest.approx(row.makespan / one.makespan, rel=1e-12), name
        assert row.memory_vs_1f1b == pytest.approx(row.peak / max(one.peak_inflight()), rel=1e-12), name
        assert (row.note == "") == (kinds.get(name).asynchronous is None), name  # a run without a flush says so


def test_a_kind_that_cannot_run_there_says_why_in_its_row_and_the_table():
    rows = {r.kind: r for r in survey(4, 6, COSTS)}
    with pytest.raises(ValueError) as refused:
        make_schedule("dualpipe-v", 4, 6)
    dual = rows["dualpipe-v"]
    assert (dual.v, dual.note) == (2, str(refused.value))
    assert [dual.makespan, dual.bubble, dual.idle, dual.peak, dual.time_vs_1f1b, dual.memory_vs_1f1b] == [None] * 6
    lines = table(list(rows.values())).splitlines()
    assert lines[0] == "kind            v     step  bubble    idle   peak  step/1f1b  peak/1f1b"
    assert "1f1b            1    27.00   33.3%    9.00    4.0      1.000       1.00" in lines
    assert f"dualpipe-v      2   not here: {refused.value}" in lines
    assert any(line.endswith("(per step of 3 without a flush; not the unsplit model's math)") for line in lines)


def test_without_1f1b_in_the_survey_its_figures_still_set_the_ratios():
    (gpipe,) = survey(4, 6, COSTS, names=["gpipe"])
    assert gpipe.time_vs_1f1b == 1.0 and gpipe.memory_vs_1f1b == 6 / 4  # 1F1B: 27 units, 4 in flight
