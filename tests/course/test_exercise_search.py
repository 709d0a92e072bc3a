"""Exercise 16, beat the search (course/exercises/searched.py): wrong answers, a schedule over the cap,
a table of pasted answers and the engine's own search in several disguises are refused, before any
process starts (wrong answers judged directly, the checker's logic; the disguises in a watched
sandbox, as when graded: tests/support/judged.py); the leaderboard keeps the best across kernels; the
challenges' optima are the exact search's. The solution itself passes in its notebook (nbval,
exercises/solutions/)."""

import importlib
import json
import re
import time

import pytest

from minipipe import Costs
from minipipe.course.exercises import WrongAnswer, check_beat_the_search
from minipipe.course.exercises import searched as ex16
from minipipe.schedule import milp
from minipipe.schedule.ops import F, I, W
from minipipe.schedule.search import heuristic, problem, search
from minipipe.schedule.vshape import v_placement
from tests.support.judged import direct, sandboxed

COSTS = Costs(forward=1.0, backward=2.0, weight=1.0)  # the exercise's (the disguises run where the checker may not)


@pytest.fixture(autouse=True)
def no_real_run(monkeypatch, tmp_path):
    """Nothing here reaches processes: a check that got that far would have passed the rest. The
    board is written where the judge runs (the notebook's folder): here, a folder of the test's."""

    def refuse(*args, **kwargs):
        raise AssertionError("the check reached the real run")

    monkeypatch.setattr(ex16.sch, "real_run", refuse)
    monkeypatch.chdir(tmp_path)


def wrong(answer, tmp_path, judge=direct) -> str:
    with pytest.raises(WrongAnswer) as info:
        judge(check_beat_the_search, answer)
    return " ".join(str(info.value).split())


def k_at_a_time(p, m, k):
    place, lists = v_placement(p), [[] for _ in range(p)]
    for first in range(0, m, k):
        group = range(first, min(first + k, m))
        for s in range(2 * p):
            lists[place[s]] += [F(s, j) for j in group]
        for s in reversed(range(2 * p)):
            lists[place[s]] += [a for j in group for a in (I(s, j), W(s, j))]
    return lists


def lists(schedule):
    return [list(row) for row in schedule.actions]


def test_a_valid_schedule_under_the_cap_but_slower_than_the_search_is_refused_with_both_times(tmp_path):
    text = wrong(lambda p, m, cap: k_at_a_time(p, m, 1), tmp_path)
    assert "on p=2 m=3 cap=1 yours takes 15, the engine's search 13.5: 1.5 longer" in text
    assert not (tmp_path / ex16.BOARD).exists()  # a refused answer is not on the board


def test_a_schedule_over_the_cap_is_refused(tmp_path):
    text = wrong(lambda p, m, cap: k_at_a_time(p, m, 2), tmp_path)
    assert "holds 2 micro-batches' activations at once" in text and "over the cap of 1" in text


def test_an_invalid_schedule_shows_the_validator(tmp_path):
    def no_last_w(p, m, cap):
        out = k_at_a_time(p, m, 1)
        out[0] = out[0][:-1]
        return out

    text = wrong(no_last_w, tmp_path)
    assert "the validator rejects it" in text and "is missing" in text


def test_a_table_of_the_challenges_answers_fails_on_the_case_drawn_afresh(tmp_path):
    table = {
        (c.p, c.m, c.cap): lists(search(c.p, c.m, ex16.COSTS, c.cap, placements=("v",)).schedule)
        for c in ex16.CHALLENGES
    }
    text = wrong(lambda p, m, cap: table[(p, m, cap)], tmp_path)
    assert "raised KeyError" in text and "If it looks answers up in a table made beforehand" in text


def bare_problem(p, m):
    """The V's terms built by the dataclass alone (no function of the search's runs): the greedy and
    the MILP below are then the first of the engine's code the learner's function reaches."""
    from minipipe.schedule.zb_greedy import Problem

    table = COSTS.table(2 * p, 2)
    return Problem(
        p, m, 2, tuple(v_placement(p)), {op: list(table[op]) for op in "FBIW"}, (0.0,) * (2 * p), (0.5,) * (2 * p)
    )


def greedy_alone(p, m, cap):
    zb = importlib.import_module("minipipe.schedule.zb_greedy")
    return zb.greedy(bare_problem(p, m), zb.Policy((cap,) * p, "alt"))


DISGUISES = {
    "the search": (
        lambda p, m, cap: lists(search(p, m, COSTS, cap, exact=False, placements=("v",)).schedule),
        "the engine's own search",
    ),
    "the heuristic": (
        lambda p, m, cap: lists(heuristic(p, m, COSTS, (cap,) * p, placements=("v",))[0].schedule),
        "the engine's own search",
    ),
    "the greedy, by another path": (greedy_alone, "the engine's own heuristic (the zero-bubble greedy)"),
    "the MILP": (
        lambda p, m, cap: milp.solve(bare_problem(p, m), cap, 100.0).lists,
        "the engine's own exact search (MILP)",
    ),
    "zb-v": (lambda p, m, cap: lists(importlib.import_module("minipipe").make_schedule("zb-v", p, m)), "make_schedule"),
}


@pytest.mark.distributed  # a sandbox forked for each
@pytest.mark.timeout(240)
@pytest.mark.parametrize("disguise", DISGUISES)
def test_the_engines_own_search_is_refused(disguise, tmp_path):
    fn, message = DISGUISES[disguise]
    assert message in wrong(fn, tmp_path, judge=sandboxed)


def test_the_board_keeps_the_best_across_kernels_and_survives_a_damaged_file(tmp_path):
    path = str(tmp_path / "board.json")
    first = ex16.CHALLENGES[0].name
    ex16.Board(path).record({first: 13.0})
    ex16.Board(path).record({first: 14.0})  # a worse try later: the best stays
    again = ex16.Board(path)  # a fresh object, as after a restart
    assert again.read()[first]["best"] == 13.0 and len(again.read()[first]["tries"]) == 2
    when = again.read()[first]["tries"][0]["when"]  # minutes, local time, as the table's reader reads a clock
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", when), when
    assert abs(time.mktime(time.strptime(when, "%Y-%m-%d %H:%M")) - time.time()) < 120
    for n in range(25):  # the last 20 tries are kept
        ex16.Board(path).record({first: 20.0 + n})
    assert [t["makespan"] for t in again.read()[first]["tries"]] == [25.0 + n for n in range(20)]
    assert again.read()[first]["best"] == 13.0  # the best outlives the tries that are dropped
    bars = {c.name: 13.5 for c in ex16.CHALLENGES}
    assert "13" in again.table(bars) and "★" not in again.table(bars)
    assert again.table(bars).splitlines()[0].split() == [
        "challenge",
        "your",
        "best",
        "the",
        "search",
        "optimum",
        "tries",
    ]
    ex16.Board(path).record({first: ex16.CHALLENGES[0].optimum})
    assert "★ optimal" in again.table(bars)
    (tmp_path / "board.json").write_text("{not json")
    assert ex16.Board(path).read() == {}
    ex16.Board(path).record({first: 13.0})
    assert json.loads((tmp_path / "board.json").read_text())[first]["best"] == 13.0


@pytest.mark.skipif(not milp.available(), reason="the exact search needs SciPy")
@pytest.mark.parametrize("challenge", ex16.CHALLENGES, ids=lambda c: c.name)
def test_the_challenges_optima_are_the_exact_searchs(challenge):
    """The MILP's M the optimum itself keeps it to seconds (~15 s for p=2, m=4 with a loose one): it
    still proves that nothing is shorter, and finds a schedule that long."""
    solved = milp.solve(
        problem(challenge.p, challenge.m, ex16.COSTS, "v"),
        challenge.cap,
        upper=challenge.optimum * (1 + 1e-6),
        time_limit=120,  # seconds alone; a loaded machine once stopped it at the default 10 s unproven
    )
    assert solved.optimal and solved.makespan == pytest.approx(challenge.optimum)
    assert ex16.the_search(challenge) > challenge.optimum  # the heuristic is beatable there


def test_the_case_drawn_afresh_is_never_a_challenge():
    """Else a table of the challenges' answers would pass now and then (about one check in twenty)."""
    challenges = {(c.p, c.m, c.cap) for c in ex16.CHALLENGES}
    assert not any(ex16.drawn() in challenges for _ in range(2000))
