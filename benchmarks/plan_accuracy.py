"""How far to trust the planner: every published run it knows, predicted against the published
throughput per GPU (counted as the publication counts it), by publication, the runs its fitted
fractions were fitted on marked, the held-out ones summarised apart (mean and largest |error|, the
trend of the error with model size). The same as `minipipe plan --accuracy`. With --refit it also
fits the fractions again from the neutral start and prints them beside efficiency.FITTED."""

import sys

from minipipe.planner.efficiency import FITTED
from minipipe.planner.efficiency_fit import accuracy, fitted, report
from minipipe.planner.published import CALIBRATION


def main(refit: bool = False):
    print(report(accuracy()))
    if refit:
        for gpu in CALIBRATION:
            got, stored = fitted(gpu), FITTED[gpu]
            same = all(
                abs(getattr(got, k) - getattr(stored, k)) < 2e-3 for k in ("gemm", "memory", "nvlink", "network")
            )
            print(
                f"refit {gpu}: {got.gemm:.4f} gemm, {got.memory:.4f} memory, {got.nvlink:.4f} nvlink, "
                f"{got.network:.4f} network; stored: {stored.gemm:.4f}, {stored.memory:.4f}, {stored.nvlink:.4f}, "
                f"{stored.network:.4f} ({'the same' if same else 'different'})"
            )


if __name__ == "__main__":
    main(refit="--refit" in sys.argv)
