"""Every exercise refuses one shortcut of each class that applies to it (tests/support/shortcuts.py), with a
message in the learner's terms: the shortcut is a cell a participant added after the reference
solution, graded as `minipipe check` grades it (the released given cells, the learner's cells in a
watched sandbox, the released check called by the judge). Each is refused before any worker
process starts. And the reference solution itself passes the same way, so that what refuses is the
shortcut, not the grading."""

import pytest

from minipipe.course.exercises import WrongAnswer
from minipipe.course.grading.submission import read_submission, released_folder
from tests.support.judged import notebook_cells, sandboxed
from tests.support.shortcuts import cases

CASES = cases()


def _check_of(exercise: str) -> str:
    return read_submission(released_folder() / f"{exercise}.ipynb").check


@pytest.mark.distributed  # a sandbox forked for each
@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", CASES)
def test_the_shortcut_is_refused_with_its_message(case):
    exercise, cell, words = CASES[case]
    cells, names = notebook_cells(exercise, cell)
    with pytest.raises(WrongAnswer) as info:
        sandboxed(_check_of(exercise), *names, cells=cells, timeout=180)
    text = " ".join(str(info.value).split())
    assert words in text, text
