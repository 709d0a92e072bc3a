"""Published training runs the planner is held against, and the achieved fraction of peak.

The planner predicts compute time as FLOPs / (peak × efficiency). `efficiency` is the one figure
it cannot derive from shapes and datasheets, so it is read off runs: `efficiency_for(run)` finds
the fraction at which the planner reproduces a published run's throughput with the published
layout, and plan.DEFAULT_EFFICIENCY holds that figure for each GPU (tests/test_plan.py keeps the
two equal). `calibrate_efficiency(result)` reads it off a run measured here instead.

Each run's figures are the publication's; what the publication does not say (micro-batch size,
schedule, v) the planner chooses as it would for any layout: its fastest fitting choice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .plan import SCHEDULES, Row, Setup, evaluate, layouts, make_setup
from .presets import MODELS
from .presets import gpu as gpu_named
from .sizing import ModelShape, course_gpt, head_flops, layer_flops


@dataclass(frozen=True)
class PublishedRun:
    """A training run someone measured and published: its setup and layout, and the throughput
    per GPU it reached, counted as the publication counts it: `counts` "model" (model FLOPs, as
    MFU) or "hardware" (with recomputation's FLOPs, as Megatron's 2021 formula)."""

    name: str
    setup: Setup
    tp: int | None                  # None: not published; the planner's fastest layout stands in
    pp: int | None
    tflops: float
    counts: str
    recompute: tuple[str, ...]
    source: str
    schedules: tuple[str, ...] = SCHEDULES

    def predict(self, efficiency: float | None = None) -> Row | None:
        """The planner's fastest fitting row with the published (tp, pp) (any, if not published)
        at `efficiency`."""
        setup = self.setup if efficiency is None else replace(self.setup, efficiency=efficiency)
        rows = [evaluate(setup, lay) for lay in layouts(setup, schedules=self.schedules, recompute=self.recompute)
                if self.tp is None or (lay.tp, lay.pp) == (self.tp, self.pp)]
        rows = sorted((r for r in rows if r.fits), key=lambda r: (r.step, r.layout.key()))
        return rows[0] if rows else None

    def predicted_tflops(self, efficiency: float | None = None) -> float:
        """Predicted throughput per GPU, counted as the publication counts it."""
        row = self.predict(efficiency)
        if row is None:
            raise ValueError(f"{self.name}: no layout with tp={self.tp}, pp={self.pp} fits")
        return row.tflops * (row.hfu / row.mfu if self.counts == "hardware" else 1.0)

    @property
    def peak_fraction(self) -> float:
        """The published throughput as a fraction of the GPU's peak (MFU when counts == "model")."""
        return self.tflops * 1e12 / self.setup.gpu.peak


def efficiency_for(run: PublishedRun) -> float:
    """The achieved fraction of peak at which the planner predicts exactly the published
    throughput for the published layout: bisection on the fastest layout's prediction (which
    grows with the fraction), repeated until the fastest layout at the fraction found is the one
    bisected on."""
    efficiency, layout = 0.5, None
    for _ in range(10):
        row = run.predict(efficiency)
        if row is None:
            raise ValueError(f"{run.name}: no layout fits")
        if row.layout == layout:
            return efficiency
        layout = row.layout
        lo, hi = 1e-3, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            r = evaluate(replace(run.setup, efficiency=mid), layout)
            got = r.tflops * (r.hfu / r.mfu if run.counts == "hardware" else 1.0)
            lo, hi = (mid, hi) if got < run.tflops else (lo, mid)
        efficiency = (lo + hi) / 2
    raise ValueError(f"{run.name}: the fastest layout keeps changing with the efficiency; no single fraction fits")


# Narayanan et al. 2021's runs: Megatron-LM on Selene (DGX A100 80GB nodes, 8 HDR InfiniBand cards
# each), vocabulary 51,200, sequence 2048, full activation recomputation, no sequence parallelism
# (it came in 2022), the gradient all-reduce after the pipeline flush; their throughput counts the
# recomputation (their eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh)).
_MEGATRON_2021 = dict(sequence_parallel=False, dp_overlap=False)
_NARAYANAN = ("Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using "
              "Megatron-LM (arXiv:2104.04473)")
GPT_1T = ModelShape("GPT 1T (Narayanan et al. 2021)", 128, 25600, 160, 51200, 2048,
                    source=f"{_NARAYANAN}, Table 1: 128 layers, hidden 25600, 160 heads; vocabulary 51,200 and "
                           f"sequence 2048 for every model")

RUNS: dict[str, PublishedRun] = {
    "gpt3-175b@1024xa100": PublishedRun(
        "GPT-3 175B on 1024 A100s", make_setup(MODELS["gpt3-175b"].with_(vocab=51200), 1024, "a100-80gb", batch=1536,
                                               **_MEGATRON_2021),
        tp=8, pp=8, tflops=140.0, counts="hardware", recompute=("full",),
        source=f"{_NARAYANAN}, §5.1: 140 teraFLOP/s per GPU for GPT-3 175B on 1024 A100s with batch 1536 (its "
               f"training-time estimate). The section does not name (t, p); (8, 8) is the layout of Table 1's "
               f"model of the same width (145.6B: 96 heads, hidden 12288)"),
    "gpt-1t@3072xa100": PublishedRun(
        "GPT 1T on 3072 A100s", make_setup(GPT_1T, 3072, "a100-80gb", batch=3072, **_MEGATRON_2021),
        tp=8, pp=64, tflops=502e3 / 3072, counts="hardware", recompute=("full",),
        source=f"{_NARAYANAN}, abstract: 502 petaFLOP/s on 3072 GPUs (163 teraFLOP/s each, 52% of peak); "
               f"Table 1: (t, p) = (8, 64), batch 3072"),
    "llama3-405b@8192xh100": PublishedRun(
        "Llama 3 405B on 8192 H100s", make_setup("llama3-405b", 8192, "h100-sxm", distributed_optimizer=True),
        tp=8, pp=16, tflops=430.0, counts="model", recompute=("none", "full"),
        source="Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Table 4: 8192 GPUs, TP 8, CP 1, "
               "PP 16, DP 64, sequence 8192, 16M tokens per batch, 430 TFLOPs per GPU (BF16 MFU 43%); the "
               "optimizer state sharded over data parallelism (§3.3.2, FSDP)"),
    "llama3-405b@16384xh100": PublishedRun(
        "Llama 3 405B on 16384 H100s", make_setup("llama3-405b", 16384, "h100-sxm", distributed_optimizer=True),
        tp=8, pp=16, tflops=400.0, counts="model", recompute=("none", "full"),
        source="Dubey et al. 2024, Table 4: 16384 GPUs, TP 8, CP 1, PP 16, DP 128, sequence 8192, 16M tokens per "
               "batch, 400 TFLOPs per GPU (BF16 MFU 41%)"),
}

# Megatron-LM's README ("Training Speed and Scalability", 2024): GPT-3 175B strong-scaled on H100s
# with the distributed optimizer (its --overlap-param-gather needs it) and every kind of
# communication overlapped; MFU counts model FLOPs. The README names no layout (it is in a figure):
# the planner's fastest stands in. Attention fused (flash), the planner's assumption for these runs.
_MEGATRON_README = ("NVIDIA/Megatron-LM README, 'Training Speed and Scalability' (2024): 'the standard GPT-3 model "
                    "(our version has slightly more than 175 billion parameters due to larger vocabulary size)' "
                    "strong-scaled 'from 96 H100 GPUs to 4608 GPUs, using the same batch size of 1152 sequences', "
                    "'MFU from 47% to 42%'; vocabulary 131,072 and sequence 4096 as the README gives for its models")
_GPT3_H100 = MODELS["gpt3-175b"].with_(vocab=131072, seq=4096, attention="fused")
for _gpus, _mfu in ((96, 0.47), (4608, 0.42)):
    RUNS[f"gpt3-175b@{_gpus}xh100"] = PublishedRun(
        f"GPT-3 175B on {_gpus} H100s", make_setup(_GPT3_H100, _gpus, "h100-sxm", batch=1152,
                                                   distributed_optimizer=True),
        tp=None, pp=None, tflops=_mfu * gpu_named("h100-sxm").peak / 1e12, counts="model",
        recompute=("none", "selective", "full"), source=_MEGATRON_README)

# which run each GPU's default efficiency (plan.DEFAULT_EFFICIENCY) is calibrated on
CALIBRATED_ON = {"a100-80gb": "gpt3-175b@1024xa100", "h100-sxm": "gpt3-175b@96xh100", "h200": "gpt3-175b@96xh100"}


# -- from a run measured here -------------------------------------------------------------------
def calibrate_efficiency(result, peak: float | None = None) -> float:
    """The achieved fraction of peak read off a measured run of the course GPT (a RunResult): the
    FLOPs of its stages' forwards and backwards (sizing.py) over the time they took (medians over
    the traced steps, tensor-parallel collectives taken out: sim/calibrate.py's compute_costs), over
    `peak` FLOP/s — by default the peak of the preset GPU the run's device is. Pass it to
    plan(..., efficiency=...) to plan for a cluster of the same GPUs."""
    from ..models.catalog import task_of
    from ..sim.calibrate import compute_costs

    task = task_of(result.config)
    if getattr(task, "name", None) != "gpt":
        raise ValueError("calibrate_efficiency counts FLOPs from the course GPT's shape; calibrate on a run "
                         "with model='gpt'")
    peak = _peak_of(result) if peak is None else peak
    shape, plan = course_gpt(task), result.plan
    costs = compute_costs(result.traces)
    micro = result.config.batch_size // (plan.mesh.dp * plan.schedule.m)
    tokens = micro * shape.seq
    last = plan.schedule.n_stages - 1
    flops = seconds = 0.0
    for s in range(plan.schedule.n_stages):
        blocks = sum(1 for i in plan.partition.layers_of(s) if 0 < i <= shape.layers)   # layer 0: the embedding
        # the engine splits the blocks over tp and keeps the head whole on every tp rank
        forward = blocks * layer_flops(shape, tokens) / plan.mesh.tp + (head_flops(shape, tokens) if s == last else 0.0)
        flops += 3 * forward
        seconds += (costs.forward[s] + costs.backward[s]) / 1000.0
    if seconds <= 0:
        raise ValueError("the run's traces hold no timed forward or backward; run with trace_steps >= 1")
    return flops / seconds / peak


def _peak_of(result) -> float:
    if result.plan.device != "cuda":
        raise ValueError("this run ran on the CPU: pass peak= (the FLOP/s its processor could reach) to calibrate "
                         "against, or calibrate on a GPU run")
    import torch

    name = torch.cuda.get_device_name(0).lower()
    for key, card in (("a100", "a100-80gb"), ("h100", "h100-sxm"), ("h200", "h200")):
        if key in name:
            return gpu_named(card).peak
    raise ValueError(f"no preset GPU matches the device {name!r}; pass peak= (its dense bf16 FLOP/s)")
