"""The models `minipipe bench` measures, and the plan of each configuration: the same in
minipipe's workers and in torch's own processes (bench/shipped.py), which build it from its name."""

from __future__ import annotations

from ..engine.config import Plan, RunConfig, prepare

SIZES = {
    # per-op overhead matters: ~1 ms per stage action
    "small": dict(model="mlp", model_args={"width": 512, "depth": 15}, batch_size=64),
    # compute dominates: ~10x the work per layer
    "large": dict(model="mlp", model_args={"width": 2048, "depth": 7}, batch_size=64),
}
QUICK_SIZES = {
    "small": dict(model="mlp", model_args={"width": 128, "depth": 7}, batch_size=32),
    "large": dict(model="mlp", model_args={"width": 512, "depth": 3}, batch_size=32),
}
MICROBATCHES = {"small": (4, 8), "large": (8,)}  # the large model's steps take ~0.5 s each


def plan_for(size: dict, kind: str, m: int, p: int = 2) -> Plan:
    """On the CPU over gloo, one thread per rank, v the kind's own default: what the benchmark compares."""
    return prepare(RunConfig(schedule=kind, p=p, m=m, threads=1, timeout=120, device="cpu", **size))
