"""The GPU check runs on the CPU too, so it cannot rot on machines without a GPU."""
import pytest

from minipipe.bench.gpu_check import main


@pytest.mark.timeout(180)
def test_gpu_check_dry_run_on_cpu(capsys):
    assert main(["--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "1. one stage on cpu vs cpu" in out and "3. calibrated interleaved" in out
    assert "4. minipipe.run on cpu" in out and "all checks passed" in out
