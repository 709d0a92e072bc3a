"""The checkers that draw their cases afresh each run judge the reference solution on draws no test
picked: here on eight seeded draws each (the exercise's own `random.Random()` seeded), so that a rare
draw a checker or a solution gets wrong fails here, not in a learner's notebook or in CI by chance (as
exercise 13's did: tests/course/test_exercise_layout.py)."""

import importlib
import random
import types

import pytest

from minipipe.course.exercises.verdict import WrongAnswer
from tests.support import judged

DRAWING = {  # exercise -> the checker module whose random.Random() draws its cases
    "02_write_gpipe": "schedules",
    "03_one_f_one_b": "schedules",
    "05_memory_budget": "memory",
    "07_interleaved_1f1b": "interleaved",
    "09_bubble_arithmetic": "bubble",
    "10_zero_bubble": "zero_bubble",
    "14_serve_and_generate": "serving",
    "15_sharded_data_parallel": "sharded",
    "16_beat_the_search": "searched",
}
SEEDS = range(8)


def seeded(seed: int) -> types.SimpleNamespace:
    """A stand-in for the module `random` whose unseeded Random() draws the same cases every time."""
    return types.SimpleNamespace(Random=lambda x=None: random.Random(seed if x is None else f"{x}-{seed}"))


@pytest.mark.distributed  # 02 to 16 but 09 and 14 end with real runs on worker processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("exercise", DRAWING)
def test_the_reference_solution_passes_on_every_draw(exercise, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # 16 writes its leaderboard beside the notebook
    monkeypatch.setattr(judged, "SAID", None)  # the verdicts hold the drawn cases: no snapshot of them
    module = importlib.import_module(f"minipipe.course.exercises.{DRAWING[exercise]}")
    failed = {}
    for seed in SEEDS:
        monkeypatch.setattr(module, "random", seeded(seed))
        try:
            text = judged.solution_judged(exercise)
        except WrongAnswer as e:
            text = str(e)
        if not text.startswith("✓ "):
            failed[seed] = text
    assert not failed, failed
