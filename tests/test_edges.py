"""Edges a mutation sample found untested, each at the edge and one step either side:
an efficiency of exactly 1 (and each of its fractions checked when memory is not priced), ep=2 in a
layout's label, a stage share summing to 1.2, a timeline of a trace that starts later or lasts no
time, a flushed step's one weight version, the throughput's default costs, exercise 08's milliseconds."""

import dataclasses

import pytest

from minipipe import Costs, make_schedule, simulate, theory
from minipipe.planner.efficiency import Efficiency
from minipipe.planner.setup_and_layout import Layout, make_setup
from minipipe.sim.request_stream import ServeCosts
from minipipe.trace import Event, Trace


@pytest.mark.parametrize(("efficiency", "refused"), [(1.0, False), (1.01, True), (0.999, False), (0.0, True)])
def test_an_efficiency_is_a_share_up_to_and_with_1(efficiency, refused):
    if refused:
        with pytest.raises(ValueError, match="efficiency"):
            make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64, efficiency=efficiency)
    else:
        make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64, efficiency=efficiency)


@pytest.mark.parametrize("key", ["gemm", "nvlink", "network"])
def test_each_efficiency_is_checked_when_memory_is_not_priced(key):
    fractions = dict(gemm=0.5, memory=None, nvlink=0.9, network=0.8)
    Efficiency(**fractions)
    with pytest.raises(ValueError, match=f"efficiency {key} is an achieved fraction"):
        Efficiency(**{**fractions, key: 1.5})


@pytest.mark.parametrize(("ep", "label"), [(1, "tp2 pp2 dp4"), (2, "tp2 pp2 dp4 ep2"), (4, "tp2 pp2 dp4 ep4")])
def test_a_layouts_label_names_ep_from_2(ep, label):
    assert Layout(2, 2, 4, 1, 8, ep=ep).label() == label


@pytest.mark.parametrize(
    ("share", "refused"), [((0.5, 0.5), False), ((0.6, 0.6), True), ((0.5, 0.4), True), ((1.5, -0.5), True)]
)
def test_a_stage_share_is_fractions_that_sum_to_1(share, refused):
    if refused:
        with pytest.raises(ValueError, match="numbers >= 0 that sum to 1"):
            ServeCosts(per_request=1.0, stage_share=share)
    else:
        ServeCosts(per_request=1.0, stage_share=share)


def test_the_timeline_of_a_trace_that_starts_later_is_drawn_from_its_start():
    trace = simulate(make_schedule("gpipe", 2, 2), Costs(forward=1.0, backward=2.0))
    shifted = dataclasses.replace(
        trace, events=[Event(e.rank, e.action, e.start + 100.0, e.end + 100.0) for e in trace.events]
    )
    assert shifted.start == 100.0 and shifted.makespan == trace.makespan
    assert shifted.ascii(width=9) == trace.ascii(width=9)


def test_a_trace_that_lasts_no_time_has_no_bubble_and_an_empty_timeline():
    empty = Trace(make_schedule("gpipe", 2, 1), [])
    assert empty.bubble() == 0.0
    assert empty.ascii(width=4).splitlines()[:2] == ["rank 0 |    |", "rank 1 |    |"]


def test_a_flushed_step_holds_one_weight_version_on_every_stage():
    from minipipe.schedule.updates import held

    s = make_schedule("interleaved", 2, 4, 2)
    assert held(s, lambda r, i: 0.0, 1.0, 9.0) == [[(1.0, 9.0)]] * 4


def test_the_throughputs_default_costs_are_f_1_and_b_2():
    assert theory.throughput("pipedream", 4, 8, 3) == theory.throughput("pipedream", 4, 8, 3, f=1.0, b=2.0)
    assert theory.throughput("pipedream", 4, 8, 3) != theory.throughput("pipedream", 4, 8, 3, f=2.0, b=2.0)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.0005, "0.5 ms"), (0.000999, "1 ms"), (0.001, "1.0 ms"), (0.0123, "12.3 ms")]
)
def test_exercise_08_shows_milliseconds_to_two_figures_below_one_and_a_tenth_above(seconds, shown):
    from minipipe.course.exercises.layer_clock import _ms

    assert _ms(seconds) == shown
