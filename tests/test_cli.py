import subprocess
import sys

import pytest

from minipipe.cli import main


def test_simulate_prints_grid_bubble_and_memory(capsys):
    assert main(["simulate", "--schedule", "1f1b", "-p", "4", "-m", "8"]) == 0
    out = capsys.readouterr().out
    assert "rank 3: 3F0 3B0" in out
    assert "bubble 27.3%   (theory 27.3%)" in out
    assert "peak in-flight micro-batches per rank, theory: [4, 3, 2, 1]" in out


def test_simulate_bad_input_exits_2_with_advice(capsys):
    assert main(["simulate", "--schedule", "interleaved", "-p", "4", "-m", "6", "-v", "2"]) == 2
    assert "use m=4 or m=8" in capsys.readouterr().err


@pytest.mark.distributed  # `python -m minipipe`, in a process of its own
def test_module_entry_point_runs():
    out = subprocess.run(
        [sys.executable, "-m", "minipipe", "simulate", "-s", "gpipe", "-p", "2", "-m", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "bubble 33.3%" in out.stdout


@pytest.mark.distributed
def test_train_shows_loss_bubbles_timeline_and_trace(tmp_path):
    trace = tmp_path / "t.json"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "minipipe",
            "train",
            "-s",
            "gpipe",
            "-p",
            "2",
            "-m",
            "4",
            "--model",
            "gpt",
            "--steps",
            "5",
            "--trace",
            str(trace),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "bubble: measured" in out.stdout and "theory 20.0%" in out.stdout
    assert "rank 1 |" in out.stdout  # the ASCII timeline
    assert "5/5" in out.stderr  # the progress bar reached the end
    assert trace.exists() and str(trace) in out.stdout


@pytest.mark.distributed  # the CLI, in a process of its own
def test_train_bad_input_exits_2_before_starting(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "minipipe", "train", "-s", "1f1b", "-p", "2", "-m", "3", "--batch-size", "32"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "batch_size=32 does not split into m=3" in out.stderr


def test_simulate_a_run_without_a_flush_beside_flushed_1f1b(capsys):
    assert main(["simulate", "--schedule", "pipedream-2bw", "-p", "4", "-m", "4", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 steps of m=4, theory: makespan 45, bubble 20.0%" in out
    assert "flushed 1F1B, the same 3 steps: makespan 63 (1.40x this run)" in out
    assert "weight versions held per rank: simulated [2, 2, 2, 2], theory [2, 2, 2, 2]" in out
    assert main(["simulate", "--schedule", "pipedream", "-p", "4", "-m", "4", "--steps", "3"]) == 0
    assert "simulated [4, 3, 2, 1], theory [4, 3, 2, 1]" in capsys.readouterr().out


@pytest.mark.parametrize("m, code", [(2, 2), (3, 0), (4, 0)])  # 2BW's rule m >= p - 1, at p = 4
def test_simulate_refuses_2bw_below_its_rule_and_says_why(capsys, m, code):
    assert main(["simulate", "--schedule", "pipedream-2bw", "-p", "4", "-m", str(m), "--steps", "2"]) == code
    if code:
        err = capsys.readouterr().err
        assert "must be at least p − 1 = 3" in err and "use m=3 or more" in err


def test_train_refuses_a_run_without_a_flush_it_cannot_run_before_starting(capsys):
    assert main(["train", "-s", "pipedream-2bw", "-p", "3", "-m", "1", "--steps", "2"]) == 2
    assert "must be at least p − 1 = 2" in capsys.readouterr().err
    assert main(["train", "-s", "pipedream-2bw", "-p", "2", "-m", "2", "--dp", "2", "--steps", "2"]) == 2
    assert "no flush between steps, so it cannot take dp=2" in capsys.readouterr().err
