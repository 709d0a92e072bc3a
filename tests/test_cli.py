import subprocess
import sys

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


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "minipipe", "simulate", "-s", "gpipe", "-p", "2", "-m", "2"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "bubble 33.3%" in out.stdout
