"""Partitioning layers into stages: exact optimality, the three methods, reports and errors."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from minipipe.engine.partition import Partition, partition, profile_layers, split_evenly
from minipipe.models import make_task


def stage_sums(costs, bounds):
    return [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])]


def all_splits(n, n_stages):
    """Every way to cut n layers into n_stages non-empty contiguous pieces, as bounds."""
    for cuts in itertools.combinations(range(1, n), n_stages - 1):
        yield (0, *cuts, n)


def assert_valid(bounds, n, n_stages):
    assert len(bounds) == n_stages + 1
    assert bounds[0] == 0 and bounds[-1] == n
    assert all(a < b for a, b in zip(bounds, bounds[1:]))


# -- split_evenly against brute force ---------------------------------------------------------
@st.composite
def costs_and_stages(draw, values=st.integers(0, 30)):
    costs = draw(st.lists(values, min_size=1, max_size=9))
    return costs, draw(st.integers(1, len(costs)))


@settings(max_examples=300, deadline=None)
@given(costs_and_stages())
def test_split_evenly_is_optimal_and_the_most_even_of_the_optimal(case):
    costs, n_stages = case
    bounds = split_evenly(costs, n_stages)
    assert_valid(bounds, len(costs), n_stages)
    splits = list(all_splits(len(costs), n_stages))
    best_max = min(max(stage_sums(costs, b)) for b in splits)
    assert max(stage_sums(costs, bounds)) == best_max
    # the tie-break promised in the docstring: least sum of squares among the optimal splits
    best_squares = min(
        sum(c * c for c in stage_sums(costs, b)) for b in splits if max(stage_sums(costs, b)) == best_max
    )
    assert sum(c * c for c in stage_sums(costs, bounds)) == best_squares


@settings(max_examples=200, deadline=None)
@given(costs_and_stages(st.floats(0, 1e3, allow_nan=False, allow_infinity=False)))
def test_split_evenly_is_optimal_on_float_costs(case):
    costs, n_stages = case
    bounds = split_evenly(costs, n_stages)
    assert_valid(bounds, len(costs), n_stages)
    best_max = min(max(stage_sums(costs, b)) for b in all_splits(len(costs), n_stages))
    assert math.isclose(max(stage_sums(costs, bounds)), best_max, rel_tol=1e-9, abs_tol=1e-9)


def test_split_evenly_spreads_the_rest_when_one_layer_dominates():
    # 9 must stand alone; the six 1s then go 2, 2, 2 rather than any lopsided split
    assert split_evenly([9, 1, 1, 1, 1, 1, 1], 4) == (0, 1, 3, 5, 7)


def test_split_evenly_is_deterministic_and_handles_the_edges():
    costs = [3, 1, 4, 1, 5, 9, 2, 6]
    assert split_evenly(costs, 3) == split_evenly(list(costs), 3)
    assert split_evenly(costs, 1) == (0, 8)
    assert split_evenly(costs, 8) == tuple(range(9))
    assert split_evenly([0, 0, 0], 2) in {(0, 1, 3), (0, 2, 3)}


# -- the three methods ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, n_stages, sizes",
    [
        (9, 4, [3, 2, 2, 2]),  # 9 = 4·2 + 1: the first stage takes the extra layer
        (10, 4, [3, 3, 2, 2]),
        (8, 4, [2, 2, 2, 2]),
        (5, 5, [1, 1, 1, 1, 1]),
        (7, 1, [7]),
    ],
)
def test_uniform_splits_by_layer_count(n, n_stages, sizes):
    part = partition([nn.Identity() for _ in range(n)], n_stages)
    assert part.method == "uniform" and part.unit == "layers"
    assert [len(part.layers_of(s)) for s in range(part.n_stages)] == sizes
    assert list(part.costs) == sizes


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.data())
def test_uniform_agrees_with_split_evenly_on_equal_costs(n, data):
    n_stages = data.draw(st.integers(1, n))
    part = partition([nn.Identity() for _ in range(n)], n_stages)
    assert_valid(part.bounds, n, n_stages)
    assert part.bounds == split_evenly([1] * n, n_stages)


def chain_of_linears(widths):
    return [nn.Linear(a, b) for a, b in zip(widths, widths[1:])]


def test_params_balances_layers_of_very_different_sizes_better_than_uniform():
    layers = chain_of_linears([16, 16, 16, 256, 256, 16, 16, 16, 16, 16])  # two big layers in the middle
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    by_params = partition(layers, 3, method="params")
    uniform = partition(layers, 3)
    assert by_params.unit == "params"
    assert list(by_params.costs) == stage_sums(sizes, by_params.bounds)

    def worst(part):
        return max(stage_sums(sizes, part.bounds))

    assert worst(by_params) < worst(uniform)
    assert worst(by_params) == min(max(stage_sums(sizes, b)) for b in all_splits(len(layers), 3))
    # counted in layers the uniform split looks perfect; counted in parameters it is not
    assert uniform.imbalance == pytest.approx(1.0)
    uniform_in_params = Partition(uniform.bounds, tuple(stage_sums(sizes, uniform.bounds)), "uniform", "params")
    assert by_params.imbalance < uniform_in_params.imbalance


class SlowLayer(nn.Module):
    """Same shape in and out as a Linear, but does `extra` additional matmuls (and their backward)."""

    def __init__(self, width, extra=200):  # ~200x a Linear: no scheduling noise closes that gap
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.extra = extra

    def forward(self, x):
        y = self.linear(x)
        for _ in range(self.extra):
            y = y @ self.linear.weight.T / math.sqrt(y.shape[-1])
        return y


def test_time_isolates_an_artificially_slow_layer():
    torch.manual_seed(0)
    width = 256
    layers = [nn.Linear(width, width) for _ in range(7)]
    layers[3] = SlowLayer(width)
    x = torch.randn(32, width)
    times = profile_layers(layers, x, repeats=5, warmup=1)
    assert len(times) == 7 and all(t > 0 for t in times)
    assert max(range(7), key=times.__getitem__) == 3
    part = partition(layers, 3, method="time", sample_input=x, repeats=5, warmup=1)
    assert part.unit == "ms"
    stage = next(s for s in range(part.n_stages) if 3 in part.layers_of(s))
    assert list(part.layers_of(stage)) == [3]


def test_profile_layers_leaves_no_grad_and_no_rng_change():
    torch.manual_seed(1)
    layers = chain_of_linears([8, 16, 4]) + [nn.Dropout(0.5), nn.Linear(4, 2)]
    layers[0].weight.grad = torch.full_like(layers[0].weight, 7.0)  # a gradient from training
    x = torch.randn(5, 8)
    before = torch.get_rng_state()
    times = profile_layers(layers, x, repeats=2, warmup=1)
    assert len(times) == len(layers)  # shapes change 8 -> 16 -> 4 -> 2: each fed its predecessor
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(layers[0].weight.grad, torch.full_like(layers[0].weight, 7.0))
    assert all(p.grad is None for layer in layers[1:] for p in layer.parameters())


def test_time_method_runs_on_the_course_gpt():
    task = make_task("gpt", depth=2, batch_size=8)
    x, _ = task.batch(0)  # integer tokens: the embedding takes no input gradient
    with torch.no_grad():  # profiling turns gradients on for itself
        part = partition(task.layers(), 2, method="time", sample_input=x[:4], repeats=1, warmup=0)
    assert_valid(part.bounds, task.n_layers, 2)


# -- Partition and its report -----------------------------------------------------------------
def test_partition_properties_and_report():
    part = Partition((0, 1, 4), (1.0, 3.0), "params", "params")
    assert part.n_stages == 2
    assert list(part.layers_of(1)) == [1, 2, 3]
    assert part.imbalance == pytest.approx(1.5)  # max 3 / mean 2
    report = part.report()
    lines = report.splitlines()
    assert any(line.split()[:2] == ["0", "0"] and "25.0%" in line for line in lines)
    assert any(line.split()[:2] == ["1", "1-3"] and "75.0%" in line for line in lines)
    assert "1.50" in report and "imbalance" in report


def test_report_of_a_real_partition_lists_every_stage():
    part = partition(make_task("mlp", depth=8).layers(), 4, method="params")
    report = part.report()
    for s in range(4):
        first, last = part.bounds[s], part.bounds[s + 1] - 1
        assert any(
            line.split()[:2] == [str(s), f"{first}-{last}" if last > first else str(first)]
            for line in report.splitlines()
        )
    assert f"{part.imbalance:.2f}" in report


@pytest.mark.parametrize("bounds, costs", [((0,), ()), ((1, 3), (1.0,)), ((0, 2, 2), (1.0, 0.0)), ((0, 2), (1.0, 2.0))])
def test_partition_rejects_invalid_bounds(bounds, costs):
    with pytest.raises(ValueError, match="bounds"):
        Partition(bounds, costs, "uniform", "layers")


# -- errors -----------------------------------------------------------------------------------
six = [nn.Identity() for _ in range(6)]


@pytest.mark.parametrize("n_stages", [0, -1, 2.0, True, "2", None])
def test_stage_count_must_be_a_positive_int(n_stages):
    with pytest.raises(ValueError, match="n_stages must be a whole number >= 1"):
        partition(six, n_stages)
    with pytest.raises(ValueError, match="n_stages must be a whole number >= 1"):
        split_evenly([1.0] * 6, n_stages)


def test_more_stages_than_layers_says_what_to_change():
    with pytest.raises(ValueError, match=r"p\*v = 8 stages but the model has only 6 layers.*p\*v <= 6"):
        partition(six, 8)
    with pytest.raises(ValueError, match="only 6 layers"):
        split_evenly([1.0] * 6, 7)


def test_unknown_method_lists_the_choices():
    with pytest.raises(ValueError, match="'flops'.*uniform, params, time"):
        partition(six, 2, method="flops")


def test_time_needs_a_sample_input():
    with pytest.raises(ValueError, match="sample_input"):
        partition(six, 2, method="time")


def test_profiling_options_only_go_with_time():
    with pytest.raises(ValueError, match="only apply to method='time'"):
        partition(six, 2, method="params", repeats=3)


def test_empty_layer_list():
    with pytest.raises(ValueError, match="no layers"):
        partition([], 1)
    with pytest.raises(ValueError, match="no layers"):
        split_evenly([], 1)


@pytest.mark.parametrize("costs", [[1.0, -2.0], [1.0, math.nan], [math.inf, 1.0]])
def test_split_evenly_rejects_bad_costs(costs):
    with pytest.raises(ValueError, match="finite and >= 0"):
        split_evenly(costs, 1)


@pytest.mark.parametrize("repeats, warmup", [(0, 1), (2, -1), (1.5, 0)])
def test_profile_layers_rejects_bad_repeat_counts(repeats, warmup):
    with pytest.raises(ValueError, match="repeats"):
        profile_layers(six, torch.zeros(2, 3), repeats=repeats, warmup=warmup)
