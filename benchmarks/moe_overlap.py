"""DualPipe-V against 1F1B with the same experts, measured on this machine's CPUs and simulated.

Both schedules train one mixture-of-experts GPT (every block's MLP 4 experts, top 2) on
p=2 × dp=2 processes with the experts split over ep=2, so every forward and backward of a block
all-to-alls its tokens. For each schedule: the measured step (median over the steps after the
first, on the traced timeline), the simulator calibrated on the run (compute per op with the
all-to-alls timed apart, one link fitted to the all-to-alls, all-reduces and messages) replaying
it as it ran (overlap 0: one stream, as gloo on a CPU runs an all-to-all and the compute one after
the other) and with the pairs overlapped (overlap 1: each DualPipe-V pair's all-to-alls hidden
under its compute, as DeepSeek's second stream does on a GPU). 1F1B pairs nothing, so its two
simulated figures are the same; what DualPipe-V's pairs earn is the gap between its two.

    PYTHONPATH=$PWD python benchmarks/moe_overlap.py [--steps 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.models import task_of
from minipipe.parallel.accounting import activation_bytes, step_traffic
from minipipe.sim.measured_costs import predicted_vs_measured
from minipipe.sim.mesh_step import simulate_mesh, step_time
from minipipe.traffic import TrafficKind

MOE = {
    "width": 64,
    "heads": 4,
    "depth": 4,
    "block": 16,
    "vocab": 32,
    "experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
    "moe_every": 1,
}


def configs(steps: int) -> list[RunConfig]:
    base = dict(
        model="moe",
        model_args=MOE,
        batch_size=32,
        m=8,
        p=2,
        dp=2,
        ep=2,
        steps=steps,
        optimizer="sgd",
        lr=0.02,
        timeout=120,
    )
    return [RunConfig(schedule=s, **base) for s in ("1f1b", "dualpipe-v")]


def measure(result) -> dict:
    plan, layers = result.plan, task_of(result.config).layers()
    steady = result.traces[1:] or result.traces
    traffic = step_traffic(plan, layers)
    check = predicted_vs_measured(steady, plan.mesh, traffic, activation_bytes(plan))
    cal = check["calibration"]
    overlapped = simulate_mesh(
        plan.schedule, dataclasses.replace(cal.costs, overlap=1.0), plan.mesh, cal.network, traffic
    )
    a2a = [c.end - c.start for t in steady for c in t.collectives if c.kind is TrafficKind.EP_ALL_TO_ALL]
    return {
        "schedule": result.config.schedule,
        "measured": check["measured_ms"],
        "simulated": check["predicted_ms"],
        "error": check["error"],
        "overlapped": step_time(overlapped),
        "pairs": len(plan.schedule.paired),
        "a2a_ms": statistics.median(a2a) if a2a else 0.0,
        "a2a_per_step": len(a2a) / len(steady) / 2,
        "losses": result.losses,
    }


def main(steps: int = 8, repeat: int = 1) -> list[dict]:
    rows = []
    for _ in range(repeat):
        rows += [measure(r) for r in run_many(configs(steps))]
    print(
        f"{'schedule':<11} {'pairs':>5} {'measured ms':>11} {'sim. ms':>8} {'error':>7} {'overlapped':>10} "
        f"{'a2a ms':>7} {'a2a/step/rank':>13}"
    )
    for r in rows:
        print(
            f"{r['schedule']:<11} {r['pairs']:>5} {r['measured']:11.2f} {r['simulated']:8.2f} {r['error']:+7.1%} "
            f"{r['overlapped']:10.2f} {r['a2a_ms']:7.3f} {r['a2a_per_step']:13.0f}"
        )
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    main(a.steps, a.repeat)
