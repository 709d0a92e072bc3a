"""The activation memory a rank holds over a step (sim.recompute_costs.activation_curve and
activation_peak): what a stage keeps from its forward on, the most its backward holds while it runs, and
for a split backward the most from the start of its I to the end of its W."""

import pytest

from minipipe import Costs, make_schedule, simulate
from minipipe.schedule.generators import inference
from minipipe.sim.recompute_costs import activation_curve, activation_peak


def one_stage(kind):
    """One rank, one micro-batch, f = 1, b = 2 (split: I = W = 1): F [0, 1), then B [1, 3) or I [1, 2), W [2, 3)."""
    return simulate(make_schedule(kind, 1, 1), Costs(forward=1.0, backward=2.0, weight=1.0))


def test_a_backward_holds_its_most_while_it_runs_and_frees_all_at_its_end():
    curve = activation_curve(one_stage("1f1b"), 0, kept=[10.0], during=[100.0])
    assert curve == [(0.0, 0), (0.0, 10.0), (1.0, 100.0), (3.0, 0.0)]


@pytest.mark.parametrize(("during_split", "most"), [(None, 100.0), ([50.0], 50.0)])
def test_a_split_backward_holds_from_its_i_to_the_end_of_its_w(during_split, most):
    curve = activation_curve(one_stage("zb-h1"), 0, kept=[10.0], during=[100.0], during_split=during_split)
    assert curve == [(0.0, 0), (0.0, 10.0), (1.0, most), (3.0, 0.0)]
    assert activation_peak(one_stage("zb-h1"), [10.0], [100.0], during_split) == [most]


def test_the_peak_is_1f1bs_in_flight_count_when_nothing_is_recomputed():
    trace = simulate(make_schedule("1f1b", 4, 8))
    assert activation_peak(trace, [100.0] * 4, [100.0] * 4) == [100.0 * n for n in trace.peak_inflight()]
    # keep 10 of 100: rank 0 holds its 4 micro-batches' inputs, one of them whole while its backward runs
    assert activation_peak(trace, [10.0] * 4, [100.0] * 4) == [130.0, 120.0, 110.0, 100.0]


def test_a_forward_only_step_holds_nothing():
    trace = simulate(inference(2, 2))
    assert trace.schedule.forward_only
    assert activation_curve(trace, 1, [10.0] * 2, [100.0] * 2) == [(trace.start, 0.0)]
    assert activation_peak(trace, [10.0] * 2, [100.0] * 2) == [0.0, 0.0]
