"""Every reference solution through its whole check here, real runs on worker processes included,
given the solution's functions directly (tests/support/judged.direct): every check passes. nbval
passes the solutions too, but through a kernel mutmut cannot see into; run here, the checkers' real
runs (the measured balance, the ranks of data and tensor parallelism, the memory measured, ...) are
reached by the tests mutmut runs on their mutants (the `checker_run` marker, [tool.mutmut])."""

import pytest

from tests.support import judged

# 01, 09, 13 and 14 start no process: tests/course/test_exercises.py runs them without this marker
STARTS_PROCESSES = [
    "02_write_gpipe",
    "03_one_f_one_b",
    "04_fix_a_deadlock",
    "05_memory_budget",
    "06_pass_the_baton",
    "07_interleaved_1f1b",
    "08_balance_the_stages",
    "10_zero_bubble",
    "11_tensor_parallel",
    "12_bucketed_all_reduce",
    "15_sharded_data_parallel",
    "16_beat_the_search",
]


@pytest.mark.distributed
@pytest.mark.checker_run
@pytest.mark.timeout(300)
@pytest.mark.parametrize("exercise", STARTS_PROCESSES)
def test_a_solution_passes_every_check_with_its_real_runs(exercise, tmp_path, monkeypatch, snapshot):
    """Every check passes; the snapshot holds what the learner reads where each question's call is refused
    (the advice the checker gives with it; judged.AskingClient), and the verdict (tests/course/conftest.py)."""
    monkeypatch.chdir(tmp_path)  # 16 writes its leaderboard beside the notebook: the folder it runs in
    if exercise == "08_balance_the_stages":
        judged.SAID = None  # its verdict holds what this machine's clock measured: no snapshot of it
    refusals = []
    text = judged.solution_judged(exercise, refusals)
    assert text.startswith("✓ ") and "checks passed" in text.splitlines()[0], text
    assert refusals == snapshot
