"""The planner picks a searched schedule where a layout's memory holds more than its kind keeps, and
says so (planner/searched.py)."""

from dataclasses import replace

import pytest

from minipipe.planner import make_setup
from minipipe.planner.evaluate import evaluate
from minipipe.planner.presets import GPUS
from minipipe.planner.searched import _room, searched_for
from minipipe.planner.setup_and_layout import Layout


def row(gpu="a100-80gb", pp=4, m=8, schedule="1f1b", v=1):
    setup = make_setup("llama2-7b", pp * 2, gpu, batch=2 * m)
    return setup, evaluate(setup, Layout(1, pp, 2, 1, m, schedule, v, "none", 0))


def gpu_holding(extra: float):
    """An A100 whose usable memory is what the 1F1B row needs, and `extra` bytes more."""
    setup, r = row()
    return replace(GPUS["a100-80gb"], memory=(r.total_memory + extra) / (1 - setup.memory_reserve))


def test_a_layout_with_room_gets_a_shorter_searched_schedule_within_its_memory():
    setup, r = row()
    pick = searched_for(setup, r)
    assert pick.held == (4, 3, 2, 1)  # 1F1B's rank r holds p − r; the GPU has room for more
    assert all(c > h for c, h in zip(pick.cap, pick.held))
    assert pick.better and pick.step < r.step
    assert all(x <= c for x, c in zip(pick.found.peak, pick.cap))
    assert pick.found.makespan < pick.kind_makespan
    assert "a searched schedule for tp1 pp4 dp2" in pick.describe() and "shorter step" in pick.describe()


def test_at_the_memory_limit_the_full_rank_holds_no_more_and_without_room_nothing_is_searched(monkeypatch):
    setup, r = row(gpu=gpu_holding(0))  # rank 0 at the limit: room for what 1F1B holds there
    pick = searched_for(setup, r)
    full = min(range(4), key=lambda k: pick.cap[k] - pick.held[k])
    assert pick.cap[full] == pytest.approx(pick.held[full])
    assert pick.found.peak[full] <= pick.cap[full] + 1e-9  # the later ranks' room is used, not rank 0's
    assert all(x <= c + 1e-9 for x, c in zip(pick.found.peak, pick.cap))

    from minipipe.planner import searched

    monkeypatch.setattr(searched, "_room", lambda setup, layout: ((4, 3, 2, 1), (4, 3, 2, 1)))
    none = searched_for(setup, r)
    assert none.found is None and not none.better and "no more than 1f1b keeps" in none.describe()
    setup = make_setup("llama2-7b", 2, "a100-80gb", batch=8)
    one = searched_for(setup, evaluate(setup, Layout(1, 1, 2, 1, 4, "1f1b", 1, "none", 0)))
    assert one.found is None and "one pipeline stage" in one.describe()


@pytest.mark.parametrize("asked", [True, False])
def test_minipipe_plan_says_what_the_search_found_when_asked(capsys, asked):
    from minipipe.cli import main

    flags = "--model llama2-7b --gpus 8 --batch 16 --schedules 1f1b --max-pp 4 --top 2".split()
    assert main(["plan", *flags, *(["--search-schedule"] if asked else [])]) == 0
    assert ("searched schedule" in capsys.readouterr().out) == asked


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_a_ranks_room_is_its_free_memory_in_micro_batches_beyond_what_it_holds_with_none_in_flight(recompute):
    """searched._room: under recomputation a rank holds activations with no micro-batch in flight (the
    transient of the one it recomputes); the room and the count held are measured beyond that."""
    from minipipe.planner import Layout, make_setup, searched
    from minipipe.planner.evaluate import predictor

    setup = make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64)
    layout = Layout(1, 4, 2, 1, 32, "1f1b", 1, recompute, 1)
    room, held = searched._room(setup, layout)
    fp = predictor(setup).footprint
    assert held == pytest.approx((4, 3, 2, 1), rel=1e-9)  # 1F1B's p − r in flight
    for r in range(4):
        state = fp.of_rank(layout, r)
        fixed = state["parameters"] + state["gradients"] + state["optimizer"]
        zero, one = fp.activation(layout, r, inflight=0), fp.activation(layout, r, inflight=1)
        assert (zero > 0) == (recompute != "none")
        assert fixed + zero + room[r] * (one - zero) == pytest.approx(setup.usable, rel=1e-9)


@pytest.mark.parametrize(("m", "searched"), [(15, True), (16, True), (17, False)])
def test_a_pipeline_of_up_to_64_micro_batch_stages_is_searched_and_a_larger_one_told_why_not(m, searched):
    """pp·m ≤ MAX_ACTIONS / 3 = 64: pp=4 with m=16 is searched, m=17 (pp·m = 68) is not, and says so."""
    setup, r = row(m=m)
    pick = searched_for(setup, r)
    assert (pick.found is not None) == searched
    if not searched:
        assert pick.step == r.step and not pick.better
        assert "pp·m = 68 is more than the search takes in seconds here (pp·m ≤ 64)" in pick.describe()
    # searched or not, it says the room each rank has and what the layout's kind holds there
    assert (pick.cap, pick.held) == _room(setup, r.layout) and len(pick.cap) == 4
