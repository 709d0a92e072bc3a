"""Exercise 13's checker judges the learner's own choice: the planner's search stays out of reach
however it is reached (and even when the learner's code swallows the refusal), answers looked up
for the named clusters fail on the ones drawn when the check runs, and choices outside the
exercise's are refused with what the choices are."""

import importlib
import re

import pytest

from minipipe.course.exercises import check_layout
from minipipe.course.exercises.layout import CHOICES, NAMED
from minipipe.course.exercises.verdict import WrongAnswer
from minipipe.planner import Layout, plan
from tests.support.judged import direct, sandboxed


def wrong(choose, judged=direct) -> str:
    with pytest.raises(WrongAnswer) as info:
        judged(check_layout, choose)
    return " ".join(str(info.value).split())


@pytest.mark.distributed  # in a watched sandbox, as when graded
def test_the_search_is_out_of_reach_by_any_path():
    def through_search(model, gpus, gpu):
        search = importlib.import_module("minipipe.planner.search")
        setup = importlib.import_module("minipipe.planner.setup_and_layout").make_setup(model, gpus, gpu)
        return search.search(setup).rows[0].layout

    def swallowed(model, gpus, gpu):
        try:
            return plan(model, gpus, gpu).rows[0].layout
        except BaseException:
            return Layout(8, 8, gpus // 64, 1, 1)  # anything, once the refusal is caught

    for choose in (through_search, swallowed):
        assert "the planner" in wrong(choose, sandboxed)


def test_answers_looked_up_for_the_named_clusters_fail_on_the_drawn_ones():
    table = {scenario: plan(*scenario, **CHOICES).rows[0].layout for scenario in NAMED}  # computed beforehand

    def look_up(model, gpus, gpu):
        return table.get((model, gpus, gpu), Layout(8, 8, max(1, gpus // 64), 1, 1))

    text = wrong(look_up)
    failed = re.search(r"choose\('([^']+)', (\d+), '([^']+)'\)|(\S+) on (\d+) × (\S+):", text)
    assert failed, text
    scenario = failed.groups()[:3] if failed.group(1) else failed.groups()[3:]
    assert (scenario[0], int(scenario[1]), scenario[2]) not in NAMED, text


def test_choices_outside_the_exercise_are_refused():
    def zero_bubble(model, gpus, gpu):
        return Layout(8, 8, gpus // 64, 1, 1, "zb-h1")

    def zero_2(model, gpus, gpu):
        return Layout(8, 8, gpus // 64, 1, 1, zero=2)

    def context_parallel(model, gpus, gpu):  # a schedule and ZeRO stage of the exercise's, cp beyond it
        return Layout(4, 8, gpus // 64, 1, 1, "1f1b", zero=1, cp=2)

    for choose in (zero_bubble, zero_2, context_parallel):
        assert "the exercise's choices are the schedules 1f1b and interleaved, zero 0 or 1" in wrong(choose)


def test_the_reference_solution_passes_on_every_cluster_the_check_may_draw(monkeypatch):
    """The check draws two clusters afresh each run, so the reference solution must hold on any:
    here on 40 drawn with a seed, and on the one CI drew when the solution tried tp in (1, 2, 4, 8)
    only (GPT-3 on 1872 H100s, where tp 6 wins and tp 8 took 12 % longer)."""
    import random

    from minipipe.course.exercises import layout
    from tests.support.judged import solution_judged

    seen = [("gpt3-175b", 1872, "h100-sxm"), *layout.drawn(40, random.Random(13))]
    monkeypatch.setattr(layout, "drawn", lambda: seen)
    assert "gpt3-175b +0.0%" in solution_judged("13_choose_a_layout")
