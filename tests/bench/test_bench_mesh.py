"""The data/tensor-parallel benchmark runs every configuration and reports ratios (figures are
printed, never asserted: they are this machine's, and noisy)."""

import pytest

pytestmark = pytest.mark.distributed


@pytest.mark.timeout(300)
def test_mesh_bench_measures_every_configuration():
    from minipipe.bench.dp_tp_vs_torch import NAMES, mesh_report, run_mesh_bench

    result = run_mesh_bench(quick=True)
    assert set(result["ms"]) == set(NAMES)
    assert all(len(times) == 1 and times[0] > 0 for times in result["ms"].values())
    assert len(result["overlap"]) == 1 and 0.0 <= result["overlap"][0] <= 1.0
    text = mesh_report(result)
    for line in ("minipipe DP4 / torch DDP4", "minipipe TP4 / torch TP4", "overlap:"):
        assert line in text
