"""Check-yourself questions (minipipe/course/question.py): the learner's answer is judged before
the explanation shows; the page without a kernel keeps the answer in a fold. What a browser shows
is checked in tests/course/test_browser_demo.py (JupyterLab) and tests/course/test_browser_export.py (offline)."""

import ast
from pathlib import Path

import nbformat
import pytest
from IPython.utils.capture import capture_output

from minipipe.course.lesson import check_yourself
from minipipe.course.question import Question, close_enough, parse_number
from minipipe.viz.offline import WIDGET_VIEW
from tests.support.notebooks import LESSON_FILES

EXPLANATION = "GPipe holds all m = 8 micro-batches, because every forward runs before any backward."


@pytest.mark.parametrize(
    "typed, value",
    [
        ("8", 8),
        (" 1,234 ", 1234),
        ("27.3 %", 27.3),
        ("3/11", 3 / 11),
        ("2.3×", 2.3),
        ("−4 ms", -4),
        (".5", 0.5),
        ("1e3", 1000),
        ("", None),
        ("eight", None),
        ("1/0", None),
    ],
)
def test_what_a_learner_types_is_read_as_a_number(typed, value):
    got = parse_number(typed)
    assert got == pytest.approx(value) if value is not None else got is None


def test_counts_are_exact_measures_are_within_two_percent():
    assert close_enough(8.0, 8) and not close_enough(7, 8) and not close_enough(8.1, 8)
    assert close_enough(27.0, 27.27) and not close_enough(26.0, 27.27)
    assert close_enough(26.0, 27.27, tolerance=0.05)


def answer(q: Question, **typed):
    for label, text in typed.items():
        q.inputs["" if label == "it" else label].value = text
    return q.check()


def shows_answer(q: Question) -> bool:
    return EXPLANATION in q.feedback.value


def test_the_explanation_shows_only_after_an_answer_is_committed():
    q = Question("How many micro-batches does rank 0 hold under GPipe?", EXPLANATION, number=8)
    assert q.feedback.value == ""  # nothing of the answer before a check
    assert all(EXPLANATION not in getattr(child, "value", "") for child in q.children)
    assert q.check() is None and "Type a number first" in q.feedback.value and not shows_answer(q)
    assert answer(q, it="8") is True and "✓ Right." in q.feedback.value and shows_answer(q)


def test_a_wrong_answer_says_which_way_and_leaves_a_second_try():
    q = Question("How many micro-batches does rank 0 hold under GPipe?", EXPLANATION, number=8)
    assert q.show.layout.display == "none"  # nothing to give up on before a first try
    assert answer(q, it="4") is False
    assert "Not right: too low." in q.feedback.value and "Try again" in q.feedback.value
    assert not shows_answer(q) and "8" not in q.feedback.value and q.show.layout.display != "none"
    assert q.check() is False  # the same again is the second wrong try
    assert "you said 4, the answer is 8" in q.feedback.value and shows_answer(q)
    assert q.revealed and q.show.layout.display == "none"
    assert answer(q, it="8") is True and "✓ Right." in q.feedback.value


def test_too_high_then_right_on_the_second_try():
    q = Question("?", EXPLANATION, number=27.27, unit="%")
    assert answer(q, it="30") is False and "too high" in q.feedback.value and not shows_answer(q)
    assert answer(q, it="27.3") is True and shows_answer(q) and not q.revealed


def test_a_missing_answer_costs_no_try():
    q = Question("?", EXPLANATION, number=8)
    assert answer(q, it="4") is False
    assert answer(q, it="") is None and q.wrong_tries == 1 and not shows_answer(q)


def test_the_answer_shows_on_request():
    q = Question("?", EXPLANATION, numbers={"GPipe": 8, "1F1B": 4}, unit=" micro-batches")
    assert answer(q, GPipe="8", **{"1F1B": "3"}) is False and not shows_answer(q)
    q.show.click()
    assert "The answer: GPipe 8 micro-batches, 1F1B 4 micro-batches." in q.feedback.value and shows_answer(q)
    assert answer(q, GPipe="8", **{"1F1B": "5"}) is False  # revealed: every verdict now says it
    assert "1F1B: you said 5, the answer is 4" in q.feedback.value and shows_answer(q)


def test_several_numbers_are_judged_each_and_only_the_wrong_ones_named():
    q = Question("GPipe and 1F1B?", EXPLANATION, numbers={"GPipe": 8, "1F1B": 4})
    assert answer(q, GPipe="8", **{"1F1B": "3"}) is False
    assert "“1F1B” too low (right: “GPipe”)" in q.feedback.value and not shows_answer(q)
    assert answer(q, GPipe="9", **{"1F1B": "3"}) is False
    assert "1F1B: you said 3, the answer is 4" in q.feedback.value and "GPipe: you said 9" in q.feedback.value
    assert answer(q, GPipe="8", **{"1F1B": "4"}) is True


def test_a_choice_is_judged():
    q = Question("Which is faster?", "Neither: the same step.", choices=["GPipe", "1F1B", "neither"], correct="neither")
    assert q.check() is None and "Pick one" in q.feedback.value
    q.choice.value = "1F1B"
    assert q.check() is False and "Not right: not “1F1B”." in q.feedback.value
    assert "the same step" not in q.feedback.value and "“neither”" not in q.feedback.value
    q.choice.value = "GPipe"
    assert q.check() is False and "the answer is “neither”" in q.feedback.value and "the same step" in q.feedback.value
    q.choice.value = "neither"
    assert q.check() is True


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({}, "exactly one of number="),
        ({"number": 1, "choices": ["a"], "correct": "a"}, "exactly one of number="),
        ({"choices": ["a", "b"], "correct": "c"}, "is not one of the choices"),
        ({"number": "8"}, "must be a number"),
        ({"numbers": {"GPipe": True}}, "must be a number"),
    ],
)
def test_an_author_mistake_is_refused_with_what_to_change(kwargs, says):
    with pytest.raises(ValueError, match=says):
        Question("?", "!", **kwargs)


def test_in_a_kernel_the_widget_shows_and_the_folded_answer_is_hidden(kernel):
    with capture_output() as out:
        check_yourself("How many micro-batches?", EXPLANATION, number=8)
    widget, picture = (o.data for o in out.outputs)
    assert WIDGET_VIEW in widget
    html = picture["text/html"]
    assert 'class="minipipe-static-fallback"' in html and 'style="display:none"' in html
    folded = html[html.index("<template>") : html.index("</template>")]  # inert until the page decides
    assert "<details" in folded and EXPLANATION in folded
    assert "The answer: 8." in folded and "widget-subarea" in html  # steps aside for a live widget
    assert "plotly" not in html.lower()  # a question needs no plotly.js


def test_without_an_answer_to_commit_the_question_is_only_folded(kernel):
    with capture_output() as out:
        check_yourself("Why?", "Because.")
    (page,) = out.outputs
    assert "<details" in page.data["text/html"] and "Because." in page.data["text/html"]


# ---- the lessons' questions ---------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
LESSONS = sorted((REPO / "lessons").glob(LESSON_FILES))
NOT_YET_JUDGED: set[str] = set()  # a lesson whose questions are still only folded


def questions(path):
    """(cell, call) for every check_yourself(...) call in a notebook's code cells."""
    nb = nbformat.read(path, as_version=4)
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check_yourself":
                yield cell, node


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_question_is_answered_before_it_is_explained(path):
    if path.stem in NOT_YET_JUDGED:
        pytest.skip(f"{path.stem}: its questions are still only folded")
    asked = list(questions(path))
    assert asked, f"{path.name} asks no check-yourself question"
    for cell, call in asked:
        keys = {k.arg for k in call.keywords}
        assert keys & {"number", "numbers", "choices"}, (
            f"{path.name}: a question on line {call.lineno} of its cell has no number=, numbers= or choices=: "
            f"let the learner commit to an answer first"
        )
        assert cell.metadata.get("jupyter", {}).get("source_hidden") and "hide-input" in cell.metadata.get(
            "tags", []
        ), (
            f"{path.name}: the cell of a question shows its code, which computes the explanation; collapse it "
            f"(metadata jupyter.source_hidden, tag hide-input)"
        )
