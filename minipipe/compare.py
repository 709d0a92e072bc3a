"""Pipeline vs tensor vs data (vs context) parallelism, measured side by side on one model and one world size.

    rows = compare(world=4, model="gpt")      # every layout p·dp·tp = 4 that fits, run for real
    print(table(rows))                        # or minipipe.viz.layouts(rows), or `minipipe compare`
    rows = compare(world=4, cp=True)          # and the layouts p·dp·cp·tp = 4 with context parallelism

Every layout trains the same model on the same global batch from the same seed, so every layout's
losses are the same numbers (same math, different speed); what differs is where the bytes go,
what each rank holds and how long a step takes. Bytes are counted as the engine sends them and
printed beside the formula's prediction (parallel/accounting.py), memory is measured per rank by kind, and
the mesh simulator, calibrated on each run, predicts its step (sim/measured_costs.py).

With a mixture-of-experts model (model="moe") the layouts with data parallelism also run with
their experts split over ep ranks (ep borrowed from dp: "DP2×EP2" is two replicas that hold half
the experts each and exchange tokens by all-to-all), beside the same dp with every expert on every
rank; the table gains an EP column.

All layouts run in one group of `world` processes (run_many), one after the other.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .engine.config import RunConfig, prepare
from .engine.launch import run_many
from .engine.run_checks import check_cores
from .models.catalog import task_of
from .parallel.accounting import Memory, activation_bytes, expected_bytes, step_traffic
from .sim.measured_costs import predicted_vs_measured
from .traffic import KINDS, TrafficKind


@dataclass
class Layout:
    p: int
    dp: int
    tp: int
    cp: int = 1
    ep: int = 1  # borrowed from dp × cp: the experts split over ep of those ranks

    @property
    def name(self) -> str:
        parts = [
            f"{axis.upper()}{n}"
            for axis, n in (("pp", self.p), ("dp", self.dp), ("cp", self.cp), ("ep", self.ep), ("tp", self.tp))
            if n > 1
        ]
        return "×".join(parts) or "1 process"

    @property
    def world(self) -> int:
        return self.p * self.dp * self.cp * self.tp


@dataclass
class Row:
    """One layout's measurement. Bytes are per step, summed over the ranks, by kind."""

    layout: Layout
    config: RunConfig
    step_ms: float  # median wall time of a step (after the first), barrier to barrier
    idle: float  # share of the ranks' step time not spent computing
    sent: dict[TrafficKind, float]  # measured
    formula: dict[TrafficKind, float]  # predicted from shapes
    memory: list[Memory]  # per global rank
    losses: list[float]
    coords: list[tuple] = field(default_factory=list)
    traced_ms: float = 0.0  # median step on the measured timelines (first action or collective to the last)
    simulated_ms: float = 0.0  # the simulator's step, calibrated on this run (simulate_mesh)
    result: object = None  # the RunResult: traces per pipeline, memory, ...

    @property
    def total_sent(self) -> float:
        return sum(self.sent.values())


def layouts(world: int, cp: bool = False, experts: bool = False) -> list[Layout]:
    """Every way to write world = p·dp·tp (p·dp·cp·tp with `cp`), pipelines first; with
    `experts`, each with dp·cp > 1 also with every ep > 1 that divides dp·cp, right after it."""
    divisors = [n for n in range(1, world + 1) if world % n == 0]
    out = [
        Layout(p, dp, world // (p * dp * c), c, e)
        for p in divisors
        for dp in divisors
        for c in divisors
        if (c == 1 or cp) and world % (p * dp * c) == 0
        for e in (divisors if experts else (1,))
        if (dp * c) % e == 0
    ]
    return sorted(out, key=lambda lay: (-lay.p, -lay.dp, -lay.cp, lay.ep))


def configs(
    world: int = 4,
    *,
    model: str = "gpt",
    model_args: dict | None = None,
    m: int = 4,
    batch_size: int = 32,
    steps: int = 8,
    schedule: str = "1f1b",
    cp: bool = False,
    **run,
) -> tuple[list[RunConfig], dict[str, str]]:
    """The run of every layout that fits, and for each one that does not, why (the engine's message).
    `cp`: the layouts with context parallelism too."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be a whole number >= 1 (processes), got {world!r}")
    check_cores(world, run.get("oversubscribe", False))  # before trying every way to split it
    fits, skipped = [], {}
    for lay in layouts(world, cp, experts=model == "moe"):
        c = RunConfig(
            schedule=schedule,
            p=lay.p,
            dp=lay.dp,
            cp=lay.cp,
            tp=lay.tp,
            ep=lay.ep,
            m=m,
            model=model,
            model_args=dict(model_args or {}),
            batch_size=batch_size,
            steps=steps,
            **run,
        )
        try:
            prepare(c)
        except ValueError as e:
            skipped[lay.name] = str(e).splitlines()[0]
            continue
        fits.append(c)
    if not fits:  # nothing would run: an empty table is not an answer
        reasons = list(dict.fromkeys(skipped.values()))
        said = (
            f"every layout: {reasons[0]}"
            if len(reasons) == 1
            else "; ".join(f"{name}: {why}" for name, why in list(skipped.items())[:4])
            + (f"; and {len(skipped) - 4} more" if len(skipped) > 4 else "")
        )
        raise ValueError(
            f"no layout of {world} processes fits ({said}). Change what the message names, or the "
            f"world (a number whose p·dp·tp splits fit the model and the batch)"
        )
    return fits, skipped


def compare(world: int = 4, progress=None, **kw) -> list[Row]:
    """Run every layout of `world` processes that fits (see `configs` for the settings) and
    measure each. Layouts that do not fit are left out; `configs` says why."""
    runs, _ = configs(world, **kw)
    return [row_of(result) for result in run_many(runs, progress)]


def row_of(result) -> Row:
    c, plan = result.config, result.plan
    layers = task_of(c).layers()
    traffic = result.traffic()
    sent = {k: sum(r.get(k, 0) for r in traffic) for k in KINDS}
    formula = {k: sum(expected_bytes(plan, r, layers)[k] for r in range(plan.world)) for k in KINDS}
    steps = result.step_ms[1:] or result.step_ms
    busy = [sum(t[-1].busy(q) for q in range(t[-1].p)) for t in result.slices]
    last = result.step_ms[-1]
    idle = 1 - sum(busy) / (plan.world * last) if last else 0.0
    steady = result.traces[1:] or result.traces  # the first step warms up (allocations, caches)
    check = predicted_vs_measured(steady, plan.mesh, step_traffic(plan, layers), activation_bytes(plan))
    return Row(
        Layout(c.p, c.dp, c.tp, c.cp, c.ep),
        c,
        statistics.median(steps),
        max(0.0, idle),
        sent,
        formula,
        result.memory,
        result.losses,
        result.coords,
        check["measured_ms"],
        check["predicted_ms"],
        result,
    )


AXES = {axis: tuple(k for k in KINDS if k.axis == axis) for axis in ("pp", "tp", "cp", "ep", "dp")}


def sent_by_axis(row: Row, formula: bool = False) -> dict[str, float]:
    """Bytes per step over all ranks by parallelism: pp (activations and gradients), tp, cp (ring
    attention), ep (the experts' all-to-alls), dp (the gradients, averaged over dp × cp)."""
    source = row.formula if formula else row.sent
    return {axis: sum(source[k] for k in kinds) for axis, kinds in AXES.items()}


def table(rows: list[Row], skipped: dict[str, str] | None = None) -> str:
    """The comparison as text: one line per layout. Step times: barrier to barrier, on the measured
    timeline, and as the simulator predicts it once calibrated on the run (error: simulated / traced
    − 1). Bytes are KiB per step over all ranks, the formula's prediction beside each ("=" where they
    agree; a CP column where a layout has context parallelism); memory is the fullest rank's."""
    kib = lambda x: f"{x / 1024:,.1f}"  # noqa: E731
    axes = [
        a
        for a in AXES
        if (a != "cp" or any(row.layout.cp > 1 for row in rows))
        and (a != "ep" or any(row.layout.ep > 1 for row in rows))
    ]
    head = (
        f"{'layout':<14} {'step ms':>8} {'traced':>7} {'sim.':>7} {'error':>6} {'idle':>6}   "
        + " ".join(f"{a.upper() + ' KiB':>16}" for a in axes)
        + f"   {'fullest rank KiB: params grads optim activ':>44}   {'loss':>7}"
    )
    lines = [head]
    for row in rows:
        measured, predicted = sent_by_axis(row), sent_by_axis(row, formula=True)
        cells = [
            f"{kib(measured[a])} {'=' if abs(measured[a] - predicted[a]) < 0.5 else '≠ ' + kib(predicted[a])}"
            if measured[a] or predicted[a]
            else "-"
            for a in axes
        ]
        full = max(row.memory, key=lambda mem: mem.total)
        mem = " ".join(f"{kib(x):>9}" for x in (full.parameters, full.gradients, full.optimizer, full.activations))
        lines.append(
            f"{row.layout.name:<14} {row.step_ms:8.2f} {row.traced_ms:7.2f} {row.simulated_ms:7.2f} "
            f"{row.simulated_ms / row.traced_ms - 1 if row.traced_ms else 0.0:+6.1%} "
            f"{row.idle:6.1%}   " + " ".join(f"{c:>16}" for c in cells) + f"   {mem:>44}   {row.losses[-1]:7.4f}"
        )
    for name, why in (skipped or {}).items():
        lines.append(f"{name:<14} does not fit: {why}")
    return "\n".join(lines)
