"""`minipipe bench`: minipipe against the ideal, the machine's own limit and PyTorch's pipelining.

Everything is measured in one run, in rounds: each round runs one step of every configuration,
in a fresh order each round, so a drift of the machine's speed hits all of them alike, and every
ratio is taken within a round. The table shows the median of the per-round ratios and, in
brackets, their interquartile range. All configurations but one share minipipe's two worker
processes; torch "as shipped" runs in two processes of its own under torchrun
(bench/shipped.py), taking its turns with the others.

    ideal                 reference / p × (m·v + p − 1) / (m·v)   (the textbook)
    contention ideal      contention × (m·v + p − 1) / (m·v)      (this machine, p busy processes)
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass

from ..engine import workers
from ..engine.execute import measured_trace
from ..schedule import kinds
from ..schedule.theory import ideal_step_time
from ..sim.measured_costs import calibrate
from ..sim.pipeline import simulate
from ..trace import covered
from .jobs import Comparison, Config, run_comparison
from .shipped import TorchProcesses
from .sizes import MICROBATCHES, QUICK_SIZES, SIZES, plan_for
from .torch_pp import SCHEDULES

__all__ = ["run_suite", "report", "comparison", "SIZES", "QUICK_SIZES", "MICROBATCHES", "plan_for"]


def training_kinds(p: int = 2, m: int = 4) -> list[str]:
    """Every registered kind that trains (its schedule has backwards), in the registry's order:
    a kind registered anywhere is benchmarked too; not those without a flush, whose steps are not
    steps (they are measured beside flushed 1F1B in lesson 09b)."""
    out = []
    for name in kinds.names():
        if kinds.get(name).asynchronous is not None:
            continue
        try:
            if not kinds.make_schedule(name, p, m).forward_only:
                out.append(name)
        except ValueError:  # a kind whose rules exclude these sizes
            pass
    return out


def contention_label(v: int) -> str:
    return "contention" if v == 1 else f"contention (v={v})"


@dataclass
class Measured:
    label: str
    per_round: list[float]  # step ms in each round
    records: list | None = None  # per round, the ranks' StepRecords (traced minipipe)
    plan: object = None


def comparison(name: str, size: dict, m: int, rounds: int, warmup: int, with_torch: bool = True) -> Comparison:
    """Every configuration of one (model, m): the reference and the machine's limit, and each
    minipipe schedule with torch's as shipped and inside minipipe's workers."""
    base = plan_for(size, "1f1b", m)
    plans = {kind: plan_for(size, kind, m) for kind in training_kinds(m=m)}
    by_v = {base.schedule.v: base, **{plan.schedule.v: plan for plan in plans.values()}}  # the machine's limit per v
    configs = [Config("reference", base)] + [Config("contention", plan) for _, plan in sorted(by_v.items())]
    for kind, plan in plans.items():
        configs.append(Config("minipipe", plan))
        if kind == "1f1b":
            configs.append(Config("minipipe", plan, trace=False))
        if with_torch and kind in SCHEDULES:  # as torch's users run it, and inside minipipe's tuned workers
            configs += [Config("torch", plan, shipped=True), Config("torch", plan)]
    return Comparison(configs, rounds, warmup, name=f"{name} m={m}", meta={"size": name, "spec": size, "m": m})


def run_suite(quick: bool = False, rounds: int | None = None, with_torch: bool = True, progress=None):
    sizes = QUICK_SIZES if quick else SIZES
    rounds = rounds or (2 if quick else 15)
    jobs = [
        comparison(name, size, m, rounds, 1 if quick else 2, with_torch)
        for name, size in sizes.items()
        for m in MICROBATCHES[name]
    ]
    with TorchProcesses(2) if with_torch else contextlib.nullcontext() as port:
        for job in jobs:
            job.torch_port = port
        times = workers.launch([job.job() for job in jobs], 2, run_comparison, progress)
    results = []
    for j, job in enumerate(jobs):
        rows = {}
        for config in job.configs:
            per_rank = [times[(j, r)].records.get(config.label) for r in range(2)]
            rounds_ = list(zip(*per_rank)) if per_rank[0] else None  # per round: (rank 0's, rank 1's)
            rows[config.label] = Measured(config.label, times[(j, 0)].ms[config.label], rounds_, config.plan)
        results.append((job.meta, rows))
    return results


def report(results) -> str:
    return "\n".join(line for meta, rows in results for line in _table(meta["size"], meta["spec"], meta["m"], rows))


def _spread(values: list[float]) -> str:
    if len(values) < 4:
        return f"{statistics.median(values):5.2f}"
    q1, med, q3 = statistics.quantiles(values, n=4)
    return f"{med:5.2f} [{q1:.2f}-{q3:.2f}]"


def _table(size: str, spec: dict, m: int, rows: dict) -> list[str]:
    ref, cont = rows["reference"].per_round, rows["contention"].per_round
    n = len(ref)
    lines = [
        f"\n== {size}: mlp {spec['model_args']}, batch {spec['batch_size']}, m={m}, p=2 (gloo, 1 thread per rank) ==",
        f"one process, the same m micro-batches in turn: {statistics.median(ref):8.2f} ms/step",
        f"each rank its own stages at once, no comm:    {statistics.median(cont):8.2f} ms/step "
        f"(= {statistics.median([2 * c / r for c, r in zip(cont, ref)]):.2f} × reference/p: the machine's contention)",
        f"{'':30}{'ms/step':>9}  {'ideal/meas.':>17}  {'contention-ideal/meas.':>22}  "
        f"{'minipipe/torch as shipped':>25}  {'minipipe/torch in our workers':>29}",
    ]
    for label, row in rows.items():
        if label.startswith(("reference", "contention")):
            continue
        v = row.plan.schedule.v
        c = rows[contention_label(v)].per_round
        to_ideal = [ideal_step_time(ref[i], 2, m, v) / row.per_round[i] for i in range(n)]
        to_cont = [c[i] * (m * v + 1) / (m * v) / row.per_round[i] for i in range(n)]
        versus = []
        for suffix in (" (as shipped)", ""):
            other = rows.get(label.replace("minipipe", "torch") + suffix) if label.startswith("minipipe") else None
            versus.append(_spread([row.per_round[i] / other.per_round[i] for i in range(n)]) if other else "")
        lines.append(
            f"{label:<30}{statistics.median(row.per_round):9.2f}  {_spread(to_ideal):>17}  "
            f"{_spread(to_cont):>22}  {versus[0]:>25}  {versus[1]:>29}"
        )
    lines += _overheads(rows, n)
    return lines


def executor_overhead(trace) -> float:
    """Rank 0's time outside its actions and its waits, per action, in µs: from its first action's
    start to its last one's end (the waits for the step's sends after its last action are not in
    that span, so they are not taken off it)."""
    events = trace.rank_events(0)
    start, end = events[0].start, max(e.end for e in events)
    waits = covered(start, end, [(w.start, w.end) for w in trace.waits if w.rank == 0])
    return 1000 * (end - start - trace.busy(0) - waits) / len(events)


def _overheads(rows: dict, n: int) -> list[str]:
    """Tracing cost, the executor's bookkeeping per action, and the simulator's error."""
    out = []
    traced, untraced = rows.get("minipipe 1f1b"), rows.get("minipipe 1f1b (untraced)")
    if traced and untraced:
        ratios = [traced.per_round[i] / untraced.per_round[i] for i in range(n)]
        out.append(f"tracing: traced / untraced 1f1b step time = {_spread(ratios)}")
    for label in ("minipipe gpipe", "minipipe 1f1b"):
        row = rows.get(label)
        if not row or not row.records:
            continue
        measured = [measured_trace(row.plan.schedule, list(records)) for records in row.records]
        predicted = simulate(row.plan.schedule, calibrate(measured))  # op costs: medians over all rounds
        errors = [predicted.makespan / t.makespan - 1 for t in measured]
        bubbles = [(t.bubble(), predicted.bubble()) for t in measured]
        overhead = [executor_overhead(t) for t in measured]
        posting = [1e6 * records[0].posting / len(t.rank_events(0)) for t, records in zip(measured, row.records)]
        out.append(
            f"{label}: simulated makespan vs measured {_spread([100 * e for e in errors])} % "
            f"(bubble measured {statistics.median(b for b, _ in bubbles):.1%}, simulated "
            f"{statistics.median(s for _, s in bubbles):.1%}); executor overhead (rank 0, outside "
            f"actions and waits) {statistics.median(overhead):.0f} µs per action, of which "
            f"{statistics.median(posting):.0f} µs inside gloo's isend/irecv calls"
        )
    return out
