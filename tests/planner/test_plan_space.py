"""What the planner's search tries and how it gets there quickly, held to the slow way: the space
makes exactly the layouts each schedule kind takes (none it refuses, none lost), the search's
shortcuts (memory first, the larger micro-batches of a miss left out) rank as predicting every layout
would, and the replays it times the top layouts with give the simulator's own spans."""

import pytest

from minipipe.planner import layouts, make_setup
from minipipe.planner.evaluate import NoFormula, Predictor
from minipipe.planner.search import miss_key, rank_key, search
from minipipe.planner.space import Space, cuts, divisors
from minipipe.planner.timing import checked_schedule
from minipipe.schedule import kinds
from minipipe.schedule.ops import inputs_of
from minipipe.sim import recompute_costs
from minipipe.sim.costs import Costs
from minipipe.sim.pipeline import compute_span, simulate

CASES = [("llama2-7b", 32, "a100-80gb"), ("llama2-70b", 64, "h100-sxm"), ("gpt3-175b", 128, "a100-80gb")]


def every_layout(setup, space=Space()):
    """The slow way: every kind, every v up to max_v, every micro-batch, recomputation and ZeRO stage
    of every cut, kept when the kind's own check takes it (a kind of several chunks per rank is not
    tried on one rank, nor selective recomputation where attention keeps no scores)."""
    model, out = setup.model, set()
    for tp, cp, pp, dp in cuts(setup, space, lambda *a: None):
        share = setup.batch // dp
        for kind in space.kinds():
            for v in range(1, space.max_v + 1):
                if pp * v > model.layers or (kinds.get(kind).takes_v and pp == 1):
                    continue
                for b in divisors(share):
                    try:
                        kinds.check(kind, pp, share // b, v)
                    except ValueError:
                        continue
                    for rc in recompute_costs.BLOCK_NAMES:
                        if rc == "selective" and model.attention == "fused":
                            continue
                        for z in space.zero if dp * cp > 1 else (0,):
                            out.add((tp, pp, dp, b, share // b, kind, v, rc, z, cp))
    return out


@pytest.mark.parametrize("case", CASES + [("llama3-405b", 2048, "h100-sxm")])
def test_the_space_makes_every_layout_a_kind_takes_and_none_it_refuses(case):
    setup = make_setup(*case)
    skipped = {}
    made = layouts(setup, skipped=skipped)
    assert all(kinds.unsuited(kinds.get(lay.schedule), lay.pp, lay.m, lay.v) is None for lay in made)
    assert {
        (lay.tp, lay.pp, lay.dp, lay.micro_batch, lay.m, lay.schedule, lay.v, lay.recompute, lay.zero, lay.cp)
        for lay in made
    } == every_layout(setup)
    assert len(made) == len(set(made))
    # what is left out before any layout is made is about the cuts, never a kind's refusal
    assert not [why for why in skipped if any(why.startswith(f"{k}:") for k in kinds.names())], skipped


def test_a_kinds_v_range_bounds_what_is_made():
    setup = make_setup("llama2-7b", 32, "a100-80gb")
    by_kind = {}
    for lay in layouts(setup):
        by_kind.setdefault(lay.schedule, set()).add(lay.v)
    for name, vs in by_kind.items():
        k = kinds.get(name)
        assert min(vs) >= k.min_v and (k.max_v is None or max(vs) <= k.max_v), (name, vs)
    assert by_kind["zb-v"] == by_kind["dualpipe-v"] == {2} and max(by_kind["interleaved"]) > 2


@pytest.mark.parametrize("case", CASES)
def test_the_search_ranks_as_predicting_every_layout_would(case):
    """Every layout the space makes, predicted on its own (memory and time together, no layout left
    out for its sibling's memory) in a fresh predictor: the same fitting rows in the same order, and
    the same closest misses."""
    setup = make_setup(*case)
    fast = search(setup, refine=0, misses=20)
    slow = Predictor(setup)
    rows = []
    for lay in layouts(setup):
        try:
            rows.append(slow.predict(lay, fallback=False))
        except NoFormula:
            continue
    fits = sorted((r for r in rows if r.fits), key=rank_key)
    assert [(r.layout, r.step) for r in fast.rows] == [(r.layout, r.step) for r in fits]
    assert [r.memory for r in fast.rows[:50]] == [r.memory for r in fits[:50]]
    closest = sorted((r for r in rows if not r.fits), key=miss_key)[:20]
    assert [(r.layout, r.total_memory) for r in fast.misses] == [(r.layout, r.total_memory) for r in closest]
    assert len(fast.rows) >= 1000 and fast.predicted >= len(fits)


def test_every_kind_declares_the_placement_its_generator_makes():
    for k in kinds.KINDS.values():
        assert k.placement is not None, k.name
        for p in range(1, 7):
            for v in range(1, 5):
                m = next((m for m in (1, p, 2 * p, 3 * p) if kinds.unsuited(k, p, m, v) is None), None)
                if m is None:
                    continue
                made = k.generate(p, m, v) if k.takes_v else k.generate(p, m)
                assert made.placement == tuple(k.placement(p, v)), (k.name, p, v)


@pytest.mark.parametrize(
    "kind,p,m,v",
    [
        ("interleaved", 4, 12, 3),
        ("zb-h1", 4, 9, 1),
        ("zb-v", 3, 8, 2),
        ("dualpipe-v", 3, 8, 2),
        ("bfs", 4, 6, 2),
        ("1f1b", 5, 7, 1),
    ],
)
def test_the_planners_replay_is_the_simulators(kind, p, m, v):
    schedule = checked_schedule(kind, p, m, v)
    assert checked_schedule(kind, p, m, v) is schedule  # made once, replayed often
    for a in (a for acts in schedule.actions for a in acts):
        assert schedule.needs(a) == inputs_of(a, schedule.n_stages, schedule.gradient_op)
    f = [1.0 + 0.37 * (s % 3) for s in range(p * v)]  # uneven stages, and messages
    costs = Costs(forward=f, backward=[2.1 * x for x in f], weight=[0.9 * x for x in f], latency=0.13)
    assert compute_span(schedule, costs) == simulate(schedule, costs).compute_span


def test_plans_keyword_filters_each_reach_the_search():
    """minipipe.planner.plan hands each of its filters to the Space it searches: every row keeps to it."""
    from minipipe.planner import plan

    base = dict(model="gpt3-2.7b", gpus=16, gpu="h100-sxm", batch=32, refine=0)
    every = plan(**base).rows
    for key, value, holds in [
        ("schedules", ["gpipe"], lambda lay: lay.schedule == "gpipe"),
        ("recompute", ["full"], lambda lay: lay.recompute == "full"),
        ("zero", [1], lambda lay: lay.zero == 1),
        ("micro_batches", [2], lambda lay: lay.micro_batch == 2),
        ("max_tp", 2, lambda lay: lay.tp <= 2),
        ("max_pp", 2, lambda lay: lay.pp <= 2),
        ("cp", [2], lambda lay: lay.cp == 2),
        ("max_v", 2, lambda lay: lay.v <= 2),
    ]:
        assert not all(holds(row.layout) for row in every), key  # the filter has something to leave out
        rows = plan(**base, **{key: value}).rows
        assert rows and all(holds(row.layout) for row in rows), key


@pytest.mark.parametrize("name", ["micro_batches", "cp", "ep"])
def test_a_list_of_degrees_is_refused_by_its_name(name):
    from minipipe.planner.space import Space

    with pytest.raises(ValueError, match=rf"^{name} must be whole numbers >= 1, got 0$"):
        Space(**{name: (0,)}).checked()


def test_a_two_stage_pipeline_counts_its_messages():
    """The pp column: the closed form's step less the same step with free messages, from p = 2 on."""
    from minipipe.planner import Layout, evaluate, make_setup

    setup = make_setup("gpt3-2.7b", 8, "h100-sxm", batch=8)
    assert evaluate(setup, Layout(1, 2, 4, 1, 2)).comm["pp"] > 0
    assert evaluate(setup, Layout(1, 1, 8, 1, 1)).comm["pp"] == 0


def test_an_fp32_optimizer_step_writes_no_16_bit_copy_back():
    """compute.optimizer_time: the state's traffic, the gradient read twice, and under a 16-bit precision
    its copy of the weights written back, over the memory bandwidth."""
    from minipipe.planner.compute import optimizer_time
    from minipipe.planner.efficiency import Achieved

    eff = Achieved(gemm=0.5, memory=0.5, bandwidth=1e12, nvlink=1.0, network=1.0)
    assert optimizer_time(1e9, "fp32", "adam", 4, eff) == pytest.approx(1e9 * (24 + 8) / 1e12)
    assert optimizer_time(1e9, "bf16-mixed", "adam", 4, eff) == pytest.approx(1e9 * (24 + 8 + 2) / 1e12)
