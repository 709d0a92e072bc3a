"""Fitting the planner's achieved fractions (efficiency.Efficiency) on published runs, and how far
to trust the result: every published run predicted, its error, the runs used to fit marked.

    from minipipe.planner.efficiency_fit import accuracy, report
    print(report(accuracy()))        # also: minipipe plan --accuracy, benchmarks/plan_accuracy.py

The fit minimises the squared log-ratio of predicted to published throughput over the calibration
runs (published.CALIBRATION), one fraction at a time with a shrinking step (coordinate descent: a
handful of numbers, no optimiser library needed). Every other run is held out.

calibrate_efficiency reads one fraction of peak off a run measured here instead (the course GPT on
this machine's devices), for Setup(efficiency=...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..sim.costs import Costs, per_stage
from .efficiency import FITTED, Efficiency
from .presets import GPUS
from .published import CALIBRATION, RUNS, PublishedRun
from .shapes import ModelShape, head_flops, layer_flops, parameters

FIELDS = ("gemm", "memory", "nvlink", "network")


def _loss(eff: Efficiency, runs: list[PublishedRun]) -> float:
    return sum(math.log(run.predicted_tflops(eff) / run.tflops) ** 2 for run in runs)


def fit(
    runs: list[PublishedRun], start: Efficiency, free: Sequence[str] = FIELDS, rounds: int = 200, tol: float = 1e-5
) -> Efficiency:
    """The fractions (those named in `free`) that best predict `runs`, from `start`."""
    best, loss = start, _loss(start, runs)
    step = {k: 0.08 for k in free}
    for _ in range(rounds):
        moved = False
        for k in free:
            for sign in (1, -1):
                value = min(1.0, max(0.05, getattr(best, k) + sign * step[k]))
                trial = replace(best, **{k: round(value, 6)})
                trial_loss = _loss(trial, runs)
                if trial_loss < loss - 1e-12:
                    best, loss, moved = trial, trial_loss, True
                    break
        if not moved:
            step = {k: s / 2 for k, s in step.items()}
            if max(step.values()) < tol:
                break
    return best


NEUTRAL = Efficiency(0.5, 0.5, 0.5, 0.5)  # where every fit starts: no figure of its own to lean on


def fitted(gpu: str) -> Efficiency:
    """What fit() finds for a GPU preset on its calibration runs, from NEUTRAL. The A100 fits all
    four fractions on four runs; the H100 its matmul fraction on one run, with the A100's memory
    and link fractions (the same memory system and NCCL; too few published H100 runs say more)."""
    runs = [RUNS[name] for name in CALIBRATION[gpu]]
    if gpu == "a100-80gb":
        return fit(runs, NEUTRAL)
    a100 = FITTED["a100-80gb"]
    return fit(runs, replace(a100, gemm=NEUTRAL.gemm, source=""), ("gemm",))


@dataclass
class Accuracy:
    name: str
    group: str
    published: float
    predicted: float
    calibrates: bool
    layout: str
    parameters: float

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def accuracy(runs: dict[str, PublishedRun] = RUNS) -> list[Accuracy]:
    """Every published run predicted at the fitted fractions of its GPU."""
    calibration = {name for names in CALIBRATION.values() for name in names}
    out = []
    for key, run in runs.items():
        row = run.predict()
        out.append(
            Accuracy(
                run.name,
                run.group,
                run.tflops,
                run.predicted_tflops(row=row),
                key in calibration,
                f"{row.layout.label()} b={row.layout.micro_batch} {row.layout.schedule_label()} "
                f"recompute {row.layout.recompute} zero {row.layout.zero}",
                parameters(run.setup.model),
            )
        )
    return out


def summary(rows: list[Accuracy]) -> dict[str, float]:
    """Mean and largest |error| of the held-out runs, and the slope of the error against
    log10(parameters) over all of them (per decade of model size: no trend is near 0)."""
    held = [r for r in rows if not r.calibrates] or rows
    xs = [math.log10(r.parameters) for r in rows]
    ys = [r.error for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return {
        "held_out": len(held),
        "mean_abs": sum(abs(r.error) for r in held) / len(held),
        "max_abs": max(abs(r.error) for r in held),
        "mean_abs_all": sum(abs(r.error) for r in rows) / len(rows),
        "max_abs_all": max(abs(r.error) for r in rows),
        "slope_per_decade": slope,
    }


def report(rows: list[Accuracy]) -> str:
    """The accuracy table, by publication: published against predicted throughput per GPU."""
    lines = []
    for group in dict.fromkeys(r.group for r in rows):
        mine = [r for r in rows if r.group == group]
        s = summary(mine)
        lines += [f"{group}:", f"  {'run':<44}{'published':>10}{'predicted':>10}{'error':>8}  role         layout"]
        lines += [
            f"  {r.name:<44}{r.published:>10.1f}{r.predicted:>10.1f}{r.error:>+8.1%}  "
            f"{'calibration' if r.calibrates else 'held out':<12} {r.layout}"
            for r in mine
        ]
        lines.append(
            f"  held out: {s['held_out']} runs, mean |error| {s['mean_abs']:.1%}, max {s['max_abs']:.1%}; "
            f"all: mean {s['mean_abs_all']:.1%}, max {s['max_abs_all']:.1%}; error against model size: "
            f"{s['slope_per_decade']:+.1%} per decade of parameters"
        )
        lines.append("")
    lines.append(
        "TFLOP/s per GPU as each publication counts it; the fractions of peak and bandwidth fitted on the "
        "calibration runs: "
        + "; ".join(
            f"{gpu} {FITTED[gpu].gemm:.3f} gemm, {FITTED[gpu].memory:.3f} memory, "
            f"{FITTED[gpu].nvlink:.3f} nvlink, {FITTED[gpu].network:.3f} network"
            for gpu in CALIBRATION
        )
    )
    return "\n".join(lines)


# -- from a run measured here -------------------------------------------------------------------
def calibrate_efficiency(
    costs: Costs,
    shape: ModelShape,
    blocks: list[int],
    *,
    micro_batch: int,
    tp: int = 1,
    peak: float,
    vocab_parallel: bool = False,
) -> float:
    """The achieved fraction of peak read off a run measured here: the FLOPs of its stages'
    forwards and backwards (shapes.py) over the time they took, over `peak` FLOP/s.

    costs: what the simulator was calibrated to (sim.pipeline.Costs: each stage's forward and
        backward in ms, tensor-parallel collectives taken out, e.g. sim.measured_costs.compute_costs(result.traces));
    blocks: transformer blocks on each stage (the last stage also runs the head);
    micro_batch: sequences per micro-batch; tp: tensor-parallel degree (the engine splits the
        blocks over tp and keeps the head whole: vocab_parallel False);
    peak: the FLOP/s to measure against, e.g. presets.gpu("a100-80gb").peak (peak_of names the
        preset of a device).
    Pass the result to plan(..., efficiency=...) to plan for a cluster of the same GPUs."""
    tokens = micro_batch * shape.seq
    forwards, backwards = (
        per_stage(t, len(blocks), name) for t, name in ((costs.forward, "forward"), (costs.backward, "backward"))
    )
    # every stage's blocks, and the head once (on the last stage): a backward is twice its forward
    forward = sum(blocks) * layer_flops(shape, tokens) / tp + head_flops(shape, tokens) / (tp if vocab_parallel else 1)
    flops, seconds = 3 * forward, (sum(forwards) + sum(backwards)) / 1000.0
    if seconds <= 0:
        raise ValueError("the costs hold no timed forward or backward; calibrate on a run with trace_steps >= 1")
    return flops / seconds / peak


def peak_of(device_name: str) -> float:
    """The dense 16-bit peak of the preset GPU a device name (torch.cuda.get_device_name) names."""
    name = device_name.lower()
    for key, card in (("a100", "a100-80gb"), ("h100", "h100-sxm"), ("h200", "h200")):
        if key in name:
            return GPUS[card].peak
    raise ValueError(f"no preset GPU matches the device {device_name!r}; pass peak= (its dense bf16 FLOP/s)")
