"""Every check whose answers could be tabled beforehand draws, each time, at least one case past the
table the shortcut tests make (tests/support/shortcuts.py, TABLED): a table that covers the draw
only now and then lets the shortcut pass now and then (exercise 07 one check in six, 10 one in
ten, 14 one in fifty, before their large cases were drawn past it)."""

import random

import pytest

from minipipe.course.exercises import bubble, gpipe, interleaved, memory, one_f_one_b, searched, serving, zero_bubble
from tests.support.shortcuts import TABLED, tabled

DRAWS = 500

KEYS = {
    "02_write_gpipe": lambda: gpipe.cases(),
    "03_one_f_one_b": lambda: one_f_one_b.cases(),
    "05_memory_budget": lambda: [case[:3] for case in memory._cases()],
    "07_interleaved_1f1b": lambda: interleaved.cases(),
    "09_bubble_arithmetic": lambda: [(k, p, m, v) for k in bubble.KINDS for p, m, v, _f, _b in bubble.cases(k)],
    "10_zero_bubble": lambda: zero_bubble.cases(),
    "14_serve_and_generate": lambda: serving.order_cases(random.Random()),
    "16_beat_the_search": lambda: [(c.p, c.m, c.cap) for c in searched.CHALLENGES] + [searched.drawn()],
}


def test_every_tabled_exercise_has_its_draw_here():
    assert set(KEYS) == set(TABLED)


@pytest.mark.parametrize("exercise", sorted(TABLED))
def test_each_check_draws_a_case_past_the_table(exercise):
    table = tabled(exercise)
    covered = sum(all(key in table for key in KEYS[exercise]()) for _ in range(DRAWS))
    assert covered == 0, f"{covered} of {DRAWS} draws lie wholly inside the table"


@pytest.mark.parametrize("kind", bubble.KINDS)
def test_09_draws_typical_cases_first_then_one_large_then_the_edges(kind):
    drawn = bubble.cases(kind)
    assert all(2 <= p <= 8 for p, *_rest in drawn[:-3]) and 9 <= drawn[-3][0] <= 32
    assert drawn[-1][0] == 1 and (kind == "interleaved" or drawn[-2][1] == 1)  # one rank; one micro-batch
