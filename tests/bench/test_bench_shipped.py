"""torch.distributed.pipelining "as shipped" for `minipipe bench`: its own processes under
torchrun, driven step by step from another process, and a failure there comes back as an error
(never a hang)."""

import os

import pytest

from minipipe.bench.shipped import ShippedClient, TorchProcesses
from minipipe.bench.suite import QUICK_SIZES

pytestmark = pytest.mark.distributed


@pytest.mark.timeout(120)
def test_torch_processes_time_their_steps_and_report_failures():
    size = QUICK_SIZES["small"]
    shipped = TorchProcesses(2)
    with shipped as port:
        client = ShippedClient(port, timeout=60)
        times = [client.step(size, kind, 4, step) for step in range(2) for kind in ("gpipe", "1f1b")]
        assert all(0 < ms < 60_000 for ms in times), times
        with pytest.raises(RuntimeError, match="unknown schedule 'zigzag'"):  # raised in torch's process
            client.step(size, "zigzag", 4, 2)
    assert shipped.proc.returncode != 0  # ended, and its log kept for reading
    os.unlink(shipped.log.name)


@pytest.mark.timeout(60)
def test_torch_processes_are_gone_after_the_benchmark():
    shipped = TorchProcesses(2)
    with shipped as port:
        ShippedClient(port, timeout=60).step(QUICK_SIZES["small"], "gpipe", 2, 0)
    assert shipped.proc.returncode == 0
