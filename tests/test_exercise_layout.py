"""Exercise 09's checker judges the learner's own choice: the planner's search stays out of reach
however it is reached (and even when the learner's code swallows the refusal), answers looked up
for the named clusters fail on the ones it does not name, and choices outside the exercise's are
refused with what the choices are."""
import importlib

import pytest

from minipipe.course.exercises import check_layout
from minipipe.course.exercises.layout import CHOICES, HIDDEN, NAMED
from minipipe.course.exercises.verdict import WrongAnswer
from minipipe.planner import Layout, plan


def wrong(choose) -> str:
    with pytest.raises(WrongAnswer) as info:
        check_layout(choose)
    return " ".join(str(info.value).split())


def test_the_search_is_out_of_reach_by_any_path():
    def through_search(model, gpus, gpu):
        search = importlib.import_module("minipipe.planner.search")
        setup = importlib.import_module("minipipe.planner.setup_and_layout").make_setup(model, gpus, gpu)
        return search.search(setup).rows[0].layout

    def swallowed(model, gpus, gpu):
        try:
            return plan(model, gpus, gpu).rows[0].layout
        except Exception:
            return Layout(8, 8, gpus // 64, 1, 1)         # anything, once the refusal is caught

    for choose in (through_search, swallowed):
        assert "asks the planner's search" in wrong(choose)


def test_answers_looked_up_for_the_named_clusters_fail_on_the_others():
    table = {scenario: plan(*scenario, **CHOICES).rows[0].layout for scenario in NAMED}   # computed beforehand

    def look_up(model, gpus, gpu):
        return table.get((model, gpus, gpu), Layout(8, 8, max(1, gpus // 64), 1, 1))
    text = wrong(look_up)
    assert any(f"{model!r}, {gpus}, {gpu!r}" in text or f"{model} on {gpus} × {gpu}" in text for model, gpus, gpu in HIDDEN)


def test_choices_outside_the_exercise_are_refused():
    def zero_bubble(model, gpus, gpu):
        return Layout(8, 8, gpus // 64, 1, 1, "zb-h1")
    assert "the exercise's choices are the schedules 1f1b and interleaved" in wrong(zero_bubble)
