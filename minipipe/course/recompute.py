"""Activation recomputation measured against its prediction, on one run per option.

    from minipipe.course.recompute import compare_recompute, table
    rows = compare_recompute(RunConfig(schedule="gpipe", p=2, m=8, model="mlp", steps=6))
    print(table(rows))

Every option trains in one group of worker processes (run_many). For each: the peak activation
bytes each rank held (measured: the stages' own count, engine/stage.py), the median step (the
traced steps' makespan, first step left out), and what the simulator predicts for both — the
time from the op costs of the run without recomputation (sim.measured_costs.calibrate), each backward
made longer by the forward it runs again (Costs.recompute), the memory from each stage's sizes
(engine.recomputing_stage.stage_bytes) replayed on the predicted timeline (sim.recompute_costs.activation_peak).
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from ..engine.launch import run_many
from ..engine.recomputing_stage import stage_bytes
from ..sim.measured_costs import calibrate
from ..sim.pipeline import simulate
from ..sim.recompute_costs import activation_peak, parse


@dataclass(frozen=True)
class RecomputeRow:
    option: str
    peak_bytes: list[int]               # per rank, measured
    predicted_bytes: list[float]        # per rank, simulated
    step_ms: float                      # median makespan of the traced steps, measured
    predicted_ms: float                 # simulated from the first option's op costs
    losses: list[float]                 # the same for every option: same math


def compare_recompute(config, options=("none", "stage")) -> list[RecomputeRow]:
    """Run `config` once per recompute option (the first is the baseline whose op costs predict
    the others) and set the measured peak bytes and step time beside the predicted ones."""
    configs = [config.replace(recompute=o) for o in options]
    results = run_many(configs)
    base = calibrate(results[0].traces[1:] or results[0].traces)
    rows = []
    for option, result in zip(options, results):
        plan = result.plan
        shares = [parse(plan.config.recompute).share(plan.partition.layers_of(s))
                  for s in range(plan.schedule.n_stages)]
        predicted = simulate(plan.schedule, dataclasses.replace(base, recompute=shares))
        sizes = stage_bytes(plan.config)
        traces = result.traces[1:] or result.traces
        rows.append(RecomputeRow(str(plan.config.recompute), result.peak_bytes[:plan.mesh.pp],
                                 activation_peak(predicted, sizes["kept"], sizes["B"], sizes["I"]),
                                 statistics.median(t.makespan for t in traces), predicted.makespan, result.losses))
    return rows


def table(rows: list[RecomputeRow]) -> str:
    base = rows[0]
    lines = [f"{'recompute':<14}{'peak bytes (rank 0)':>20}{'predicted':>12}{'vs ' + base.option:>10}"
             f"{'step ms':>10}{'predicted':>11}{'vs ' + base.option:>10}"]
    for r in rows:
        lines.append(f"{r.option:<14}{r.peak_bytes[0]:>20,}{r.predicted_bytes[0]:>12,.0f}"
                     f"{r.peak_bytes[0] / base.peak_bytes[0]:>10.2f}{r.step_ms:>10.2f}{r.predicted_ms:>11.2f}"
                     f"{r.step_ms / base.step_ms:>10.2f}")
    return "\n".join(lines)
