"""Schedules found by search (minipipe/schedule/search.py,
minipipe/schedule/zb_greedy.py, minipipe/schedule/milp.py): valid for every size
tried, never above the cap, never slower than the best hand-written kind that fits it, and the optimum
where the exact search finishes — the optimum checked against every schedule there is, enumerated, on
the smallest sizes. All judged by the simulator and the Trace, not by the search's own accounting."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minipipe import Costs, Schedule, make_schedule, simulate
from minipipe.schedule import kinds, milp
from minipipe.schedule.ops import Action
from minipipe.schedule.replay import Stuck, replay
from minipipe.schedule.search import HAND_WRITTEN, _as_schedule, least_cap, problem, search
from minipipe.schedule.validate import validate

SCIPY = pytest.mark.skipif(not milp.available(), reason="the exact search needs SciPy: pip install -e '.[search]'")


def peak_per_rank(schedule: Schedule, costs: Costs) -> list[float]:
    """What the Trace says each rank holds at most, in micro-batches (a chunk is 1/v of one)."""
    return [x / schedule.v for x in simulate(schedule, costs).peak_inflight()]


def best_hand_written(p, m, costs, cap) -> float:
    """The shortest step of the kinds that take (p, m) and fit the cap, from make_schedule and the simulator."""
    best = math.inf
    for name in HAND_WRITTEN:
        k = kinds.get(name)
        if kinds.unsuited(k, p, m, k.default_v):
            continue
        s = make_schedule(name, p, m)
        if max(peak_per_rank(s, costs)) <= cap + 1e-9:
            best = min(best, simulate(s, costs).makespan)
    return best


costs_st = st.builds(
    lambda f, b, w, lat: Costs(forward=f, backward=b, weight=w * b, latency=lat),
    st.sampled_from([0.5, 1.0, 1.5]),
    st.sampled_from([1.0, 2.0, 3.0]),
    st.sampled_from([0.25, 0.5, 0.75]),
    st.sampled_from([0.0, 0.0, 0.1]),
)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 4),
    m=st.integers(1, 8),
    costs=costs_st,
    cap=st.one_of(st.none(), st.sampled_from([1.0, 1.5, 2.0, 3.0, 4.0, 6.0])),
)
def test_the_search_finds_a_valid_schedule_under_the_cap_no_slower_than_any_hand_written_kind(p, m, costs, cap):
    found = search(p, m, costs, cap, exact=False)
    validate(found.schedule)
    trace = simulate(found.schedule, costs)
    assert trace.makespan == pytest.approx(found.makespan)
    limit = math.inf if cap is None else cap
    assert max(peak_per_rank(found.schedule, costs)) <= limit + 1e-9
    assert found.peak == pytest.approx(peak_per_rank(found.schedule, costs))
    assert found.makespan <= best_hand_written(p, m, costs, limit) + 1e-9
    work = m * (costs.forward + costs.backward)  # no schedule beats a rank's own work
    assert found.makespan >= work - 1e-9


def test_a_cap_below_the_least_any_schedule_needs_is_refused_naming_the_least():
    costs = Costs(forward=1, backward=2, weight=1)
    assert least_cap(4, 8, costs) == 1.0
    with pytest.raises(ValueError, match=r"least cap is 1 .*at least 1"):
        search(4, 8, costs, cap=0.99, exact=False)
    at = search(4, 8, costs, cap=1.0, exact=False)  # at the limit: one micro-batch at a time
    assert max(peak_per_rank(at.schedule, costs)) == 1.0
    above = search(4, 8, costs, cap=1.5, exact=False)
    assert above.makespan < at.makespan and max(peak_per_rank(above.schedule, costs)) <= 1.5
    in_bytes = least_cap(4, 8, costs, unit_bytes=1000)
    assert in_bytes == 1000
    with pytest.raises(ValueError) as refused:
        search(4, 8, costs, cap=999, unit_bytes=1000, exact=False)
    assert str(refused.value) == (
        "cap=999 bytes on rank 0 is below what any valid schedule needs: every micro-batch holds its "
        "activations on a rank from its forward to its backward, so the least cap is 1000 (one micro-batch's); "
        "raise the cap to at least 1000"
    )
    with pytest.raises(ValueError, match=r"^cap=0.5 micro-batches' activations on rank 2 is below"):
        search(4, 8, costs, cap=[1, 1, 0.5, 1], exact=False)
    with pytest.raises(ValueError, match="m .micro-batches. must be a whole number"):
        search(4, 0, costs, cap=2)


def test_more_memory_never_makes_the_found_step_longer():
    costs = Costs(forward=1, backward=2, weight=1)
    spans = [search(4, 8, costs, cap, exact=False).makespan for cap in (1, 1.5, 2, 3, 4, 6, 8, None)]
    assert spans == sorted(spans, reverse=True)
    assert spans[0] > spans[-1]


def test_at_1f1bs_memory_the_search_finds_zero_bubbles_schedules_and_better():
    """With p micro-batches per rank (1F1B's rank 0) and F = I = W, the search matches ZB-V: the bubble
    of ZB-H1 halved; with half of that memory it is still shorter than 1F1B."""
    costs = Costs(forward=1, backward=2, weight=1)
    p, m = 4, 8
    found = search(p, m, costs, cap=p, exact=False)
    assert found.makespan == simulate(make_schedule("zb-v", p, m), costs).makespan
    assert found.makespan < simulate(make_schedule("zb-h1", p, m), costs).makespan
    tight = search(p, m, costs, cap=p / 2, exact=False)
    assert tight.how.startswith("heuristic")  # no hand-written kind fits
    assert max(tight.peak) <= p / 2
    line = search(p, m, costs, cap=p, exact=False, placements=("line",))
    assert line.makespan == simulate(make_schedule("zb-h1", p, m), costs).makespan


def test_where_a_hand_written_kind_beats_the_heuristic_the_search_returns_the_kind():
    """With W a quarter of B, ZB-V at its own memory (p micro-batches a rank) is 18.125 long and the
    greedy's best 19: the kinds are candidates, so the search is never worse than one that fits."""
    costs = Costs(forward=1, backward=1, weight=0.25)
    found = search(4, 8, costs, cap=4, exact=False)
    zb_v = simulate(make_schedule("zb-v", 4, 8), costs).makespan
    assert found.how == "zb-v" and found.makespan == zb_v == 18.125
    assert found.heuristic > zb_v
    below = search(4, 8, costs, cap=3.75, exact=False)  # ZB-V no longer fits: the greedy's
    assert below.how.startswith("heuristic") and max(below.peak) <= 3.75


# -- the exact search ------------------------------------------------------------------------------
def orders(actions: list[Action]):
    """Every order of one rank's actions in which each stage's F's, I's and W's go in micro-batch
    order and each micro-batch's F, I, W in turn: the space the search and the MILP share."""

    def ok(seq):
        seen = set()
        for a in seq:
            earlier = {"F": [], "I": [("F", a.mb)], "W": [("I", a.mb)]}[a.op] + ([(a.op, a.mb - 1)] if a.mb else [])
            if any((a.stage, *e) not in seen for e in earlier):
                return False
            seen.add((a.stage, a.op, a.mb))
        return True

    for seq in itertools.permutations(actions):
        if ok(seq):
            yield list(seq)


def brute_force(p, m, costs, cap):
    """The shortest of every schedule on the one-stage-per-rank placement, by enumeration."""
    pr = problem(p, m, costs, "line")
    per_rank = [list(orders([Action(op, r, j) for op in "FIW" for j in range(m)])) for r in range(p)]
    best = math.inf
    for lists in itertools.product(*per_rank):
        s = Schedule.build("any", p, m, 1, lists)
        try:
            times = replay(s, lambda r, a: pr.cost[a.op][a.stage], lambda d, src, dst: pr.comm[0])
        except Stuck:
            continue
        if max(peak_per_rank(s, costs)) <= cap + 1e-9:
            best = min(best, max(e for row in times for _, e in row))
    return best


@SCIPY
@pytest.mark.parametrize("p,m,cap", [(2, 2, 1), (3, 2, 1), (3, 2, 2), (2, 3, 1)])
@pytest.mark.parametrize(
    "costs", [Costs(forward=1, backward=2, weight=1), Costs(forward=1, backward=3, weight=0.5, latency=0.25)]
)
def test_the_exact_search_is_the_optimum_of_every_schedule_there_is(p, m, cap, costs):
    found = search(p, m, costs, cap, exact=True, placements=("line",))
    best = brute_force(p, m, costs, cap)
    assert found.optimum is not None
    assert found.makespan == pytest.approx(found.optimum)
    assert found.optimum == pytest.approx(best)
    alone = milp.solve(problem(p, m, costs, "line"), cap, upper=10 * best)  # the MILP itself, unseeded
    assert alone.optimal and alone.makespan == pytest.approx(best)
    assert simulate(found.schedule, costs).makespan == pytest.approx(found.makespan)
    assert max(peak_per_rank(found.schedule, costs)) <= cap


@SCIPY
@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 2), (3, 4)])
@pytest.mark.parametrize(("cap", "found"), [(0.5, False), (0.99, False), (1.0, True), (1.01, True)])
def test_the_exact_search_under_less_than_one_micro_batch_proves_nothing_fits(p, m, cap, found):
    """Below one micro-batch held no schedule exists, proven without a search (the bound is the M given);
    at exactly one, every micro-batch runs through alone."""
    costs = Costs(forward=1, backward=2, weight=1)
    pr = problem(p, m, costs, "line")
    solved = milp.solve(pr, cap, upper=100.0)
    assert solved.optimal
    if found:
        assert solved.lists is not None and max(peak_per_rank(_as_schedule(solved.lists, pr), costs)) <= cap
    else:
        assert (solved.lists, solved.makespan, solved.bound) == (None, math.inf, 100.0)


@SCIPY
@pytest.mark.parametrize(("upper", "found"), [(1.0, False), (6.99, False), (7.0, True), (7.01, True)])
def test_the_exact_search_finds_nothing_longer_than_the_makespan_it_is_given(upper, found):
    """p=2, m=2, a cap of 2: the optimum is 7 (the MILP unbounded says so); given less, it proves none."""
    solved = milp.solve(problem(2, 2, Costs(forward=1, backward=2, weight=1), "line"), 2, upper=upper)
    assert solved.optimal
    if found:
        assert solved.makespan == pytest.approx(7.0)
    else:
        assert (solved.lists, solved.makespan, solved.bound) == (None, math.inf, upper)


@SCIPY
@pytest.mark.parametrize(
    ("found", "reported", "bound"), [(True, 5.5, 5.5), (True, None, 0.0), (False, 5.5, 5.5), (False, None, 0.0)]
)
def test_an_unfinished_exact_search_keeps_the_solvers_bound(monkeypatch, found, reported, bound):
    """HiGHS stopped by its time limit (status 1), with or without a schedule found: the bound is the
    solver's proven one (0 where it gives none, which proves nothing), never the makespan or the M."""
    import types

    import scipy.optimize

    real = scipy.optimize.milp

    def stopped(*args, **kwargs):
        res = real(*args, **kwargs)
        return types.SimpleNamespace(
            status=1, x=res.x if found else None, fun=res.fun if found else None, mip_dual_bound=reported
        )

    monkeypatch.setattr(scipy.optimize, "milp", stopped)
    solved = milp.solve(problem(2, 2, Costs(forward=1, backward=2, weight=1), "line"), 2, upper=100.0)
    assert not solved.optimal and solved.bound == bound
    assert solved.makespan == (pytest.approx(7.0) if found else math.inf)
    assert (solved.lists is not None) == found


@SCIPY
@pytest.mark.parametrize("p,m,cap", [(2, 2, 1), (2, 2, 2), (3, 2, 1.5), (3, 2, 3), (4, 2, 2)])
def test_the_search_returns_the_optimum_where_the_exact_search_finishes(p, m, cap):
    """On every placement, unseeded (its M a loose bound, not the best found): the front door gives
    the least of the optima, and it is never above the heuristic nor a hand-written kind that fits."""
    costs = Costs(forward=1, backward=2, weight=1)
    found = search(p, m, costs, cap)  # exact="auto": small enough here
    assert found.optimum is not None, found.table()
    alone = []
    for name in ("line", "v", "interleaved"):
        pr = problem(p, m, costs, name)
        solved = milp.solve(pr, cap, upper=10 * m * p * 3)
        assert solved.optimal
        alone.append(solved.makespan)
    assert found.makespan == pytest.approx(min(alone)) == pytest.approx(found.optimum)
    assert found.makespan <= found.heuristic + 1e-9
    assert found.makespan <= best_hand_written(p, m, costs, cap) + 1e-9
    assert found.gap is not None and found.gap >= 0


@SCIPY
def test_the_heuristic_can_be_beaten_and_the_table_says_by_how_much(capfd):
    costs = Costs(forward=1, backward=2, weight=1)
    found = search(2, 3, costs, cap=1)
    assert capfd.readouterr().out == ""  # the solver's own log stays out of the learner's notebook
    assert found.how.startswith("optimum") and found.makespan < found.heuristic
    assert f"the heuristic is {100 * found.gap:.1f} % above it" in found.table()
    rows = [line.split() for line in found.table().splitlines()[2:-1]]
    by_makespan = sorted(found.tried, key=lambda t: t.makespan)
    fits, held = [t for t in by_makespan if t.fits], [t for t in by_makespan if not t.fits]
    assert fits and held  # cap 1 refuses 1F1B's two activations: both verdicts are shown
    assert [row[-1] for row in rows] == ["yes"] * len(fits) + ["no"] * len(held)  # the ones that fit first
    assert [float(row[-3]) for row in rows] == pytest.approx([t.makespan for t in fits + held], rel=1e-3)


def test_without_scipy_the_exact_search_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError("no scipy here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    costs = Costs()
    assert not milp.available()
    assert search(2, 2, costs, 1).optimum is None  # auto: the heuristic alone
    with pytest.raises(ImportError) as refused:
        search(2, 2, costs, 1, exact=True)
    assert str(refused.value) == (
        "the exact search needs SciPy (HiGHS): pip install 'minipipe[search]' (SciPy, ~40 MB), "
        "or call search(..., exact=False) for the heuristic alone"
    )


@pytest.mark.parametrize("cap", [1.0, 2.0, 4.0, 100.0])
def test_the_heuristic_tries_every_whole_number_of_micro_batches_up_to_the_cap(cap):
    """zb_greedy.candidates: uniform limits at each multiple of the least cap (one micro-batch) up to the
    cap, but no higher than 2p + 1 (ZB-H2's 2p − 1 fills the bubble), each with every rule for I, F and W."""
    from minipipe.schedule.search import problem
    from minipipe.schedule.zb_greedy import candidates

    p, m = 4, 16
    policies = candidates(problem(p, m, Costs(forward=1, backward=2, weight=1)), (cap,) * p)
    uniform = {pol.limit for pol in policies if len(set(pol.limit)) == 1}
    most = min(cap, 2 * p + 1)
    assert uniform == {(float(k),) * p for k in range(1, int(most) + 1)}
    assert {(pol.first, pol.w_fill) for pol in policies} == set(
        itertools.product(("I", "F", "alt"), ("fits", "always"))
    )


@pytest.mark.parametrize(
    ("p", "m", "caps", "limits"),
    [
        # uniform 1 to 2p + 1 = 9, the staircases p − r and p − r + p − 1
        (4, 16, (100.0,) * 4, {(float(k),) * 4 for k in range(1, 10)} | {(4, 3, 2, 1), (7, 6, 5, 4)}),
        # m = 3 micro-batches hold no more than 3 anywhere: the second staircase is uniform 3
        (4, 3, (100.0,) * 4, {(1,) * 4, (2,) * 4, (3,) * 4, (3, 3, 2, 1)}),
        # each rank's own cap bounds its limits; the uniform levels run up to the largest cap
        (
            4,
            16,
            (2, 5, 5, 5),
            {(1,) * 4, (2,) * 4, (2, 3, 3, 3), (2, 4, 4, 4), (2, 5, 5, 5), (2, 3, 2, 1), (2, 5, 5, 4)},
        ),
        # a cap that is no whole number of micro-batches is itself a level
        (2, 8, (2.5, 2.5), {(1, 1), (2, 2), (2.5, 2.5), (2, 1), (2.5, 2)}),
    ],
)
def test_the_heuristics_limits_are_the_uniform_levels_and_two_staircases_under_each_ranks_cap(p, m, caps, limits):
    """zb_greedy.candidates, every limit it tries written out: each appears once, with all six rules."""
    from minipipe.schedule.zb_greedy import candidates

    policies = candidates(problem(p, m, Costs(forward=1, backward=2, weight=1)), caps)
    assert {pol.limit for pol in policies} == {tuple(map(float, limit)) for limit in limits}
    assert len(policies) == 6 * len(limits)


def test_one_rank_has_one_placement_and_more_have_every_one():
    from minipipe.schedule.search import PLACEMENTS, heuristic

    assert [t.name for t in heuristic(1, 4, Costs())] == ["heuristic (line)"]
    assert [t.name for t in heuristic(2, 4, Costs())] == [f"heuristic ({name})" for name in PLACEMENTS]


def test_the_greedys_rules_for_an_i_and_an_f_both_ready_give_three_orders():
    """p 3, m 4, cap 3 a rank: after rank 0's I0 and W0, its I1 and F3 are both ready; "I" runs I1 first,
    "alt" the other of the last (an I ran last: F3), and "F" has run its Is while F3 waited for memory."""
    from minipipe.schedule.zb_greedy import Policy, greedy

    pr = problem(3, 4, Costs(forward=1, backward=2, weight=1))
    rank_0 = {
        first: " ".join(map(str, greedy(pr, Policy((3.0,) * 3, first, "fits"))[0])) for first in ("I", "F", "alt")
    }
    assert rank_0["I"].startswith("0F0 0F1 0F2 0I0 0W0 0I1 0F3")
    assert rank_0["alt"].startswith("0F0 0F1 0F2 0I0 0W0 0F3 0I1")
    assert rank_0["F"].startswith("0F0 0F1 0F2 0I0 0I1 0I2 0W0 0F3")
