"""The GPU check runs on the CPU too, so it cannot rot on machines without a GPU."""

import pytest
import torch

from minipipe.bench import gpu_check
from minipipe.bench.gpu_check import main


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_gpu_check_dry_run_on_cpu(capsys):
    assert main(["--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "1. one stage on cpu vs cpu" in out and "3. calibrated interleaved" in out
    assert "4. minipipe.run, 1 rank on cpu (gloo)" in out and "5. minipipe.run, 2 ranks on cpu (gloo)" in out
    assert "6. 00_start_here with CUDA_VISIBLE_DEVICES='', every assert held" in out and "run: cpu [] on the CPU" in out
    assert "all checks passed" in out


@pytest.mark.parametrize("gpus,expected", [(1, (1, 4)), (2, (2, 4)), (3, (3, 4)), (4, (4, 5)), (8, (4, 9))])
def test_on_a_gpu_machine_both_ways_run(monkeypatch, gpus, expected):
    """One GPU per rank where possible, and always more ranks than GPUs, which must share."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    per_rank, shared = gpu_check.modes(torch.device("cuda"))
    assert (per_rank, shared) == expected
    assert per_rank <= gpus < shared
