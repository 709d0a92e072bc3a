"""The limits the schedule, the simulator and the planner already had, at the limit and one step either
side: what is accepted at the boundary is accepted, what is one step past it is refused with its reason.
(The sizes a run cannot have, recomputed layers among them, are tests/test_limits.py's; input wrong in
kind, not in size, tests/test_bad_input.py's.)"""

import os

import pytest

from minipipe import make_schedule, theory
from minipipe.outputs import writable_file, writable_folder
from minipipe.planner import make_setup
from minipipe.planner.shapes import ModelShape
from minipipe.planner.space import MIN_CP_TOKENS, Space, cuts
from minipipe.sim.costs import Costs
from minipipe.traffic import buckets
from tests.support import refusals

OK = None


def outcome(fn, *args, **kwargs):
    """None when fn accepts, else its ValueError's message (recorded: the test's snapshot holds it whole)."""
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        refusals.record(e)
        return str(e)
    return OK


def expect(got, refused):
    """`refused`: OK (accepted) or a piece of the message that must refuse it."""
    if refused is OK:
        assert got is OK, f"refused at the limit: {got}"
    else:
        assert got is not OK, f"accepted one step past the limit (expected a refusal saying {refused!r})"
        assert refused in got


# -- a kind's micro-batches and chunks ----------------------------------------------------------
@pytest.mark.parametrize(
    "kind, p, m, refused",
    [
        ("interleaved", 4, 3, "multiple of p"),
        ("interleaved", 4, 4, OK),
        ("interleaved", 4, 5, "multiple of p"),
        ("interleaved", 3, 5, "multiple of p"),
        ("interleaved", 3, 6, OK),
        ("interleaved", 3, 7, "multiple of p"),
        ("dualpipe-v", 3, 5, "at least 2p = 6"),
        ("dualpipe-v", 3, 6, OK),
        ("dualpipe-v", 3, 7, OK),
        ("1f1b", 3, 0, "whole number >= 1"),
        ("1f1b", 3, 1, OK),
        ("1f1b", 0, 1, "whole number >= 1"),
    ],
)
def test_a_kinds_micro_batches_at_its_minimum(kind, p, m, refused):
    got = outcome(make_schedule, kind, p, m)
    expect(got, refused)


@pytest.mark.parametrize(
    "kind, v, refused",
    [
        ("interleaved", 1, "needs v >= 2"),
        ("interleaved", 2, OK),
        ("interleaved", 3, OK),
        ("zb-v", 1, "needs v >= 2"),
        ("zb-v", 2, OK),
        ("zb-v", 3, "exactly v=2"),
        ("dualpipe-v", 3, "exactly v=2"),
        ("bfs", 0, "whole number >= 1"),
        ("bfs", 1, OK),
        ("1f1b", 1, OK),
        ("1f1b", 2, "does not apply"),
        ("1f1b", 0, "whole number >= 1"),
    ],
)
def test_a_kinds_chunks_per_rank_at_its_bounds(kind, v, refused):
    got = outcome(make_schedule, kind, 2, 8, v)
    expect(got, refused)


@pytest.mark.parametrize("layers, refused", [(5, True), (6, False), (7, False)])
def test_every_stage_needs_a_layer_at_exactly_one_each(layers, refused):
    got = outcome(make_schedule, "interleaved", 3, 6, 2, n_layers=layers)  # p·v = 6 stages
    assert (got is not None) == refused and (not refused or "p*v = 3*2 = 6 stages" in got)


# -- where a textbook formula stops answering -----------------------------------------------------
@pytest.mark.parametrize(
    "kind, p, m, answers",
    [
        ("zb-h1", 4, 3, False),
        ("zb-h1", 4, 4, True),
        ("zb-h1", 4, 5, True),
        ("zb-v", 3, 4, False),
        ("zb-v", 3, 5, True),
        ("zb-v", 3, 6, True),
        ("bfs", 4, 3, False),
        ("bfs", 4, 4, True),
        ("bfs", 4, 5, True),
    ],
)
def test_a_formula_answers_from_its_minimum_micro_batches(kind, p, m, answers):
    got = outcome(theory.makespan, kind, p, m, None, 1.0, 2.0, 1.0)
    assert (got is OK) == answers, got


@pytest.mark.parametrize("w, answers", [(0.75, True), (1.0, True), (1.25, False)])
def test_zb_h1s_formula_holds_up_to_w_equal_f(w, answers):
    """w <= min(f, b − w) with f = 1, b = 4: f is the binding bound."""
    assert (outcome(theory.makespan, "zb-h1", 2, 4, None, 1.0, 4.0, w) is OK) == answers


@pytest.mark.parametrize("w, answers", [(0.75, True), (1.0, True), (1.25, False)])
def test_zb_h1s_formula_holds_up_to_w_equal_half_the_backward(w, answers):
    """w <= min(f, b − w) with f = 3, b = 2: b − w is the binding bound, at w = b/2."""
    assert (outcome(theory.makespan, "zb-h1", 2, 4, None, 3.0, 2.0, w) is OK) == answers


# -- the simulator's costs --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, refused",
    [
        ({"backward": 2.0, "weight": 1.99}, OK),
        ({"backward": 2.0, "weight": 2.0}, OK),
        ({"backward": 2.0, "weight": 2.01}, "cannot exceed"),
        ({"overlap": -0.01}, "from 0"),
        ({"overlap": 0.0}, OK),
        ({"overlap": 1.0}, OK),
        ({"overlap": 1.01}, "from 0"),
        ({"latency": -1e-9}, "latency must be >= 0"),
        ({"latency": 0.0}, OK),
        ({"bandwidth": 0.0}, "bandwidth > 0"),
        ({"bandwidth": 1e-9}, OK),
        ({"forward": 0.0, "backward": 0.0}, "both 0"),
        ({"forward": 0.0, "backward": 1e-9}, OK),
    ],
)
def test_costs_at_their_bounds(kwargs, refused):
    got = outcome(Costs, **kwargs)
    expect(got, refused)


@pytest.mark.parametrize(
    "scale, refused",
    [
        ({-1: 2.0}, "stages are 0..3"),
        ({0: 2.0}, OK),
        ({3: 2.0}, OK),
        ({4: 2.0}, "stages are 0..3"),
        ({1: 0.0}, "> 0, got 0.0"),
        ({1: 1e-9}, OK),
    ],
)
def test_a_stage_scale_names_stages_0_to_the_last(scale, refused):
    got = outcome(Costs(stage_scale=scale).table, 4)
    expect(got, refused)


@pytest.mark.parametrize("n, refused", [(3, True), (4, False), (5, True)])
def test_per_stage_costs_give_one_number_per_stage(n, refused):
    got = outcome(Costs(forward=[1.0] * n).table, 4)
    assert (got is not None) == refused and (not refused or f"got {n} values for 4 stages" in got)


@pytest.mark.parametrize("share, refused", [(-0.01, True), (0.0, False), (1.0, False), (1.01, True)])
def test_a_recomputed_share_runs_from_0_to_1(share, refused):
    assert (outcome(Costs(recompute=share).table, 2) is not None) == refused


# -- data parallelism's buckets -------------------------------------------------------------------------
@pytest.mark.parametrize("limit, expected", [(7, [[2], [1, 0]]), (8, [[2, 1], [0]]), (9, [[2, 1], [0]])])
def test_a_bucket_closes_exactly_at_its_byte_limit(limit, expected):
    """Gradients of 3, 4, 4 bytes from the last: 4 + 4 = 8 fills a bucket of 8 exactly, not of 7."""
    assert buckets([3, 4, 4], limit) == expected


def test_a_bucket_closes_where_the_dtype_changes_even_below_its_limit():
    """Each bucket is one flat buffer: gradients of another dtype (the keys) start a new one (a mutant
    that ignored the keys survived the sample of `make mutation-sample` before this test)."""
    assert buckets([1, 1, 1], 8, keys=["fp32", "bf16", "bf16"]) == [[2, 1], [0]]
    assert buckets([1, 1, 1], 8, keys=["bf16"] * 3) == [[2, 1, 0]]


def test_a_gradient_larger_than_a_bucket_has_a_bucket_of_its_own():
    assert buckets([2, 9, 2], 8) == [[2], [1], [0]]


# -- the planner's cuts ------------------------------------------------------------------------------
def cps_searched(seq: int) -> set[int]:
    shape = ModelShape("limits", 4, 256, 8, 1000, seq)
    setup = make_setup(shape, 4, "a100-80gb", batch=8, efficiency=0.5)
    return {cp for _, cp, _, _ in cuts(setup, Space(), lambda why, n=1: None)}


@pytest.mark.parametrize(
    "seq, searched", [(2 * MIN_CP_TOKENS - 4, False), (2 * MIN_CP_TOKENS, True), (2 * MIN_CP_TOKENS + 4, True)]
)
def test_context_parallelism_is_searched_from_its_minimum_tokens_per_rank(seq, searched):
    """cp = 2 keeps seq/2 positions a rank; one step is 2·cp = 4 positions (seq must split into 2·cp chunks)."""
    assert (2 in cps_searched(seq)) == searched


@pytest.mark.parametrize("layers, most", [(3, 2), (4, 4), (5, 4)])
def test_pipeline_stages_at_most_the_layers(layers, most):
    shape = ModelShape("limits", layers, 256, 8, 1000, 512)
    setup = make_setup(shape, 4, "a100-80gb", batch=8, efficiency=0.5)
    assert max(pp for _, _, pp, _ in cuts(setup, Space(), lambda why, n=1: None)) == most


# -- output paths -------------------------------------------------------------------------------------
def test_an_output_file_ending_in_a_separator_is_a_folder(tmp_path):
    assert writable_file(str(tmp_path / "trace.json"), "--trace") is None
    expect(outcome(writable_file, str(tmp_path / "trace.json") + os.sep, "--trace"), "is a folder")
    expect(outcome(writable_file, str(tmp_path), "--trace"), "is a folder")
    assert writable_folder(str(tmp_path / "ckpt") + os.sep, "checkpoint_dir") is None
