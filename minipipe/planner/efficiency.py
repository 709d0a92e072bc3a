"""The achieved fractions of a GPU's datasheet figures: the only numbers the planner cannot derive
from shapes and datasheets, so they are fitted on published runs (efficiency_fit.py fits them on the
runs published.CALIBRATION names; tests/planner/test_plan_accuracy.py keeps these equal to its fit, and
the runs held out are reported apart: benchmarks/plan_accuracy.py, `minipipe plan --accuracy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # presets.py's GPU, for the checker only: no import at run time
    from .presets import GPU


@dataclass(frozen=True)
class Efficiency:
    """gemm: fraction of the peak a matmul's multiply-adds reach (a fused attention's too);
    memory: fraction of the HBM bandwidth element-wise work, a matmul's own reads and writes and
    the optimizer step reach (None: memory traffic not priced, every FLOP at `gemm` × peak);
    nvlink, network: fractions of the links' nominal bandwidths the collectives and messages reach."""

    gemm: float
    memory: float | None = None
    nvlink: float = 1.0
    network: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("gemm", "memory", "nvlink", "network"):
            value = getattr(self, key)
            if value is None and key == "memory":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"efficiency {key} is an achieved fraction in (0, 1]; got {value!r}")


@dataclass(frozen=True)
class Achieved:
    """What one GPU reaches: `gemm`/`memory` as in Efficiency, `bandwidth` its memory's bytes/s
    (memory × hbm; None when memory is), `nvlink`/`network` its links' bytes/s."""

    gemm: float
    memory: float | None
    bandwidth: float | None
    nvlink: float
    network: float


def achieved(eff: Efficiency, gpu: GPU) -> Achieved:
    memory = eff.memory if gpu.hbm is not None else None
    return Achieved(
        eff.gemm,
        memory,
        None if memory is None or gpu.hbm is None else memory * gpu.hbm,
        eff.nvlink * gpu.nvlink,
        eff.network * gpu.network,
    )


_FIT = "fitted by calibrate.fit on published.CALIBRATION[{!r}]"

# By GPU preset. H200: the H100's fractions (the same chip; no published H200 run is used). Any
# other GPU: the A100's, unless given.
FITTED: dict[str, Efficiency] = {
    "a100-80gb": Efficiency(0.793538, 0.751637, 0.664117, 0.329234, _FIT.format("a100-80gb")),
    "h100-sxm": Efficiency(0.649375, 0.751637, 0.664117, 0.329234, _FIT.format("h100-sxm")),
}
FITTED["h200"] = FITTED["h100-sxm"]
FITTED["h800"] = FITTED["h100-sxm"]  # the H100's die: its fractions, no run of its own to fit
