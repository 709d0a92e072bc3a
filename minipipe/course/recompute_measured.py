"""Activation recomputation measured beside its prediction: what one micro-batch holds on each
stage (stage_bytes, measured on this process), and one run per option against the simulator.

    from minipipe.course.recompute_measured import compare_recompute, stage_bytes, table
    sizes = stage_bytes(RunConfig(schedule="1f1b", p=2, m=4, recompute="stage"))   # bytes per stage
    rows = compare_recompute(RunConfig(schedule="gpipe", p=2, m=8, model="mlp", steps=6))
    print(table(rows))

Every option trains in one group of worker processes (run_many). For each: the peak activation
bytes each rank held (measured: the stages' own count, engine/stage.py), the median step (the
traced steps' makespan, first step left out), and what the simulator predicts for both — the
time from the op costs of the run without recomputation (sim.measured_costs.calibrate), each backward
made longer by the forward it runs again (Costs.recompute), the memory from each stage's sizes
(stage_bytes, below) replayed on the predicted timeline (sim.recompute_costs.activation_peak).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

import torch

from ..engine.config import prepare
from ..engine.launch import run_many
from ..engine.partition import stage_module
from ..engine.recomputing_stage import RecomputingStage
from ..models.catalog import task_of
from ..sim.measured_costs import calibrate
from ..sim.pipeline import simulate
from ..sim.recompute_costs import activation_peak, parse


@dataclass(frozen=True)
class RecomputeRow:
    option: str
    peak_bytes: list[int]  # per rank, measured
    predicted_bytes: list[float]  # per rank, simulated
    step_ms: float  # median makespan of the traced steps, measured
    predicted_ms: float  # simulated from the first option's op costs
    losses: list[float]  # the same for every option: same math


def compare_recompute(config, options=("none", "stage")) -> list[RecomputeRow]:
    """Run `config` once per recompute option (the first is the baseline whose op costs predict
    the others) and set the measured peak bytes and step time beside the predicted ones."""
    configs = [config.replace(recompute=o) for o in options]
    results = run_many(configs)
    base = calibrate(results[0].traces[1:] or results[0].traces)
    rows = []
    for result in results:
        plan = result.plan
        shares = [
            parse(plan.config.recompute).share(plan.partition.layers_of(s)) for s in range(plan.schedule.n_stages)
        ]
        predicted = simulate(plan.schedule, dataclasses.replace(base, recompute=shares))
        sizes = stage_bytes(plan.config)
        traces = result.traces[1:] or result.traces
        rows.append(
            RecomputeRow(
                str(plan.config.recompute),
                result.peak_bytes[: plan.mesh.pp],
                activation_peak(predicted, sizes["kept"], sizes["B"], sizes["I"]),
                statistics.median(t.makespan for t in traces),
                predicted.makespan,
                result.losses,
            )
        )
    return rows


def table(rows: list[RecomputeRow]) -> str:
    base = rows[0]
    lines = [
        f"{'recompute':<14}{'peak bytes (rank 0)':>20}{'predicted':>12}{'vs ' + base.option:>10}"
        f"{'step ms':>10}{'predicted':>11}{'vs ' + base.option:>10}"
    ]
    for r in rows:
        lines.append(
            f"{r.option:<14}{r.peak_bytes[0]:>20,}{r.predicted_bytes[0]:>12,.0f}"
            f"{r.peak_bytes[0] / base.peak_bytes[0]:>10.2f}{r.step_ms:>10.2f}{r.predicted_ms:>11.2f}"
            f"{r.step_ms / base.step_ms:>10.2f}"
        )
    return "\n".join(lines)


def stage_bytes(config) -> dict[str, list[int]]:
    """Measure, on this process, what one micro-batch holds on each stage of `config`'s run (its
    recompute option included): "kept" from its forward to its backward, and at most while its
    backward runs — "B" as one backward, "I" as an input gradient (whose rebuilt graphs wait for
    the W). The inputs of sim.recompute_costs.activation_peak, which predicts each rank's peak from a
    (simulated or measured) Trace."""
    plan = prepare(config)
    task, cut, n, m = task_of(plan.config), plan.partition, plan.schedule.n_stages, plan.schedule.m
    recompute, layers = parse(plan.config.recompute), task.layers()
    x, y = (t.chunk(plan.config.dp * m)[0] for t in task.batch(0))
    out = {"kept": [], "B": [], "I": []}
    for s in range(n):
        flags = recompute.of_stage(cut.layers_of(s)) if recompute.on else [False] * len(cut.layers_of(s))
        stage = RecomputingStage(
            s,
            stage_module(layers, cut, s),
            n,
            m,
            task.loss,
            split_backward=True,
            flags=flags,
            per_layer=recompute.mode == "layers",
        )
        target = y if stage.is_last else None
        nxt = stage.forward(0, x, target)
        stage.forward(1, x, target)
        grad = None if stage.is_last else torch.ones_like(nxt)
        stage.backward(0, grad)
        after_b, stage.backward_peak = stage.backward_peak, 0
        stage.backward_input(1, grad)
        stage.backward_weight(1)
        kept = stage.bytes_per_microbatch
        out["kept"].append(kept)
        out["B"].append(max(kept, after_b))
        out["I"].append(max(kept, stage.backward_peak))
        x = nxt
    return out
