"""A layout's prediction: `Row`, its memory by kind, its step time by part, its throughput.

evaluate.py makes Rows; report.py prints them, search.py ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .setup_and_layout import GiB, Layout


@dataclass
class Row:
    """One layout's prediction. Times in seconds per step; memory in bytes on the GPU that needs
    most (pipeline rank `memory_rank`); comm: seconds per step by kind on the busiest rank (tp,
    cp and zero inside its actions, pp on the pipeline's critical path, dp its step-end
    reduction; "dp exposed" the part that adds to the step)."""

    layout: Layout
    step: float
    pipeline: float
    compute: float
    bubble: float
    comm: dict[str, float]
    memory: dict[str, float]
    memory_rank: int
    tflops: float  # model TFLOP/s per GPU
    mfu: float
    hfu: float  # with recomputation's FLOPs
    capacity: float  # the GPU's memory, bytes
    usable: float = 0.0  # what a layout may fill: capacity less the reserve
    optimizer: float = 0.0
    timed: str = "closed form"  # how the pipeline was timed: "closed form" (exact), "closed form (close)",
    # "simulated"
    note: str = ""  # what was changed to predict it (a near miss)

    @property
    def fits(self) -> bool:
        return self.total_memory <= self.usable

    @property
    def tight(self) -> bool:
        """Fits in the GPU, but not with the memory reserve left free."""
        return self.usable < self.total_memory <= self.capacity

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    def why(self) -> str:
        """Why it does not fit, for people."""
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in sorted(self.memory.items(), key=lambda kv: -kv[1]))
        reserve = (
            f" usable (the GPU's {self.capacity / GiB:.1f} less its reserve)" if self.usable < self.capacity else ""
        )
        return (
            f"needs {self.total_memory / GiB:.1f} GiB of {self.usable / GiB:.1f} GiB{reserve} on pipeline rank "
            f"{self.memory_rank} ({parts} GiB)"
        )

    def as_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "tp": lay.tp,
            "cp": lay.cp,
            "pp": lay.pp,
            "dp": lay.dp,
            "micro_batch": lay.micro_batch,
            "m": lay.m,
            "schedule": lay.schedule,
            "v": lay.v,
            "recompute": lay.recompute,
            "zero": lay.zero,
            "ep": lay.ep,
            "step_s": self.step,
            "pipeline_s": self.pipeline,
            "compute_s": self.compute,
            "bubble": self.bubble,
            **{f"{k.replace(' ', '_')}_s": v for k, v in self.comm.items()},
            "optimizer_s": self.optimizer,
            **{f"{k}_bytes": v for k, v in self.memory.items()},
            "memory_bytes": self.total_memory,
            "usable_bytes": self.usable,
            "memory_rank": self.memory_rank,
            "fits": self.fits,
            "tight": self.tight,
            "tflops_per_gpu": self.tflops,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "timed": self.timed,
        }
