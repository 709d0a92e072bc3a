"""`minipipe bench`: minipipe against the ideal, the machine's own limit and PyTorch's pipelining.

Everything is measured in one group of processes, in rounds: each round runs every
configuration once (A B C ... A B C ...), so a drift of the machine's speed hits all of them
alike, and every ratio is taken within a round. The table shows the median of the per-round
ratios and their spread.

    ideal                 reference / p × (m·v + p − 1) / (m·v)   (the textbook)
    contention ideal      contention × (m·v + p − 1) / (m·v)      (this machine, p busy processes)
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..config import RunConfig, prepare
from ..launch import _launch
from ..simulate import calibrate, simulate
from ..trace import Event, Trace, Wait
from .jobs import BenchJob, run_job

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
MINIPIPE = ("naive", "gpipe", "1f1b", "interleaved")
TORCH = ("gpipe", "1f1b", "interleaved")


@dataclass
class Measured:
    size: str
    m: int
    label: str
    per_round: list[float] = field(default_factory=list)     # median step ms of each round
    records: list = field(default_factory=list)              # last traced step, per round (minipipe)


def plan_for(size: dict, kind: str, m: int, p: int = 2):
    v = 2 if kind == "interleaved" else 1
    return prepare(RunConfig(schedule=kind, p=p, m=m, v=v, threads=1, timeout=120, **size))


def build_jobs(sizes: dict, ms, rounds: int, steps: int, warmup: int, with_torch: bool = True) -> list[BenchJob]:
    jobs = []
    for size in sizes.values():
        for m in ms:
            base = plan_for(size, "1f1b", m)
            templates = [BenchJob("reference", base), BenchJob("contention", base),
                         BenchJob("contention", plan_for(size, "interleaved", m))]
            templates += [BenchJob("minipipe", plan_for(size, k, m)) for k in MINIPIPE]
            templates.append(BenchJob("minipipe", base, trace=False))
            if with_torch:
                templates += [BenchJob("torch", plan_for(size, k, m)) for k in TORCH]
            for _ in range(rounds):
                jobs += [BenchJob(t.what, t.plan, steps, warmup, t.trace) for t in templates]
    return jobs


def run_suite(quick: bool = False, rounds: int | None = None, ms=(4, 8), with_torch: bool = True, progress=None):
    sizes = QUICK_SIZES if quick else SIZES
    rounds = rounds or (1 if quick else 5)
    steps, warmup = (2, 1) if quick else (5, 2)
    jobs = build_jobs(sizes, ms, rounds, steps, warmup, with_torch)
    payloads = _launch(jobs, 2, progress, run_job)
    out: dict[tuple, Measured] = {}
    for j, job in enumerate(jobs):
        size = next(n for n, sz in sizes.items() if sz["model_args"] == job.plan.config.model_args)
        key = (size, job.plan.schedule.m, _label(job))
        entry = out.setdefault(key, Measured(size, job.plan.schedule.m, _label(job)))
        entry.per_round.append(statistics.median(payloads[(j, 0)]["ms"]))
        if job.what == "minipipe" and job.trace:
            entry.records.append((job.plan, [payloads[(j, r)]["record"] for r in range(2)]))
    return sizes, out, len(jobs)


def _label(job: BenchJob) -> str:
    if job.what == "contention":
        return "contention" + (" (v=2)" if job.plan.schedule.v > 1 else "")
    return job.label


def trace_of(plan, records) -> Trace:
    """The measured Trace of one step from the ranks' StepRecords (times in s -> ms)."""
    t0 = min(t for rec in records for _, t, _ in rec.events)
    events = [Event(r, a, 1000 * (s - t0), 1000 * (e - t0)) for r, rec in enumerate(records) for a, s, e in rec.events]
    waits = [Wait(r, w, 1000 * (s - t0), 1000 * (e - t0)) for r, rec in enumerate(records) for w, s, e in rec.waits]
    return Trace(plan.schedule, events, source="measured", waits=waits)


def ideal(reference_ms: float, p: int, m: int, v: int) -> float:
    return reference_ms / p * (m * v + p - 1) / (m * v)


def report(sizes: dict, results: dict) -> str:
    lines = []
    for size, spec in sizes.items():
        for m in sorted({k[1] for k in results if k[0] == size}):
            rows = {k[2]: v for k, v in results.items() if k[0] == size and k[1] == m}
            lines += _table(size, spec, m, rows)
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:5.2f} [{min(values):.2f}-{max(values):.2f}]" if len(values) > 1 else f"{med:5.2f}"


def _table(size: str, spec: dict, m: int, rows: dict) -> list[str]:
    ref, cont = rows["reference"].per_round, rows["contention"].per_round
    cont_v = rows.get("contention (v=2)", rows["contention"]).per_round
    n = len(ref)
    lines = [f"\n== {size}: mlp {spec['model_args']}, batch {spec['batch_size']}, m={m}, p=2 (gloo, 1 thread per rank) ==",
             f"one process, the same m micro-batches in turn: {statistics.median(ref):8.2f} ms/step",
             f"each rank its own stages at once, no comm:    {statistics.median(cont):8.2f} ms/step "
             f"(= {statistics.median([2 * c / r for c, r in zip(cont, ref)]):.2f} × reference/p: the machine's contention)",
             f"{'':24}{'ms/step':>9}  {'ideal/measured':>18}  {'contention-ideal/meas.':>22}  {'minipipe/torch':>18}"]
    for label, row in rows.items():
        if label.startswith(("reference", "contention")):
            continue
        v = 2 if "interleaved" in label else 1
        c = cont_v if v == 2 else cont
        to_ideal = [ideal(ref[i], 2, m, v) / row.per_round[i] for i in range(n)]
        to_cont = [c[i] * (m * v + 1) / (m * v) / row.per_round[i] for i in range(n)]
        vs_torch = ""
        other = rows.get(label.replace("minipipe", "torch")) if label.startswith("minipipe") else None
        if other is not None:
            vs_torch = _spread([row.per_round[i] / other.per_round[i] for i in range(n)])
        lines.append(f"{label:<24}{statistics.median(row.per_round):9.2f}  {_spread(to_ideal):>18}  "
                     f"{_spread(to_cont):>22}  {vs_torch:>18}")
    lines += _overheads(rows, n)
    return lines


def _overheads(rows: dict, n: int) -> list[str]:
    """Tracing cost, the executor's bookkeeping per action, and the simulator's error."""
    out = []
    traced, untraced = rows.get("minipipe 1f1b"), rows.get("minipipe 1f1b (untraced)")
    if traced and untraced:
        out.append(f"tracing: traced / untraced 1f1b step time = {_spread([traced.per_round[i] / untraced.per_round[i] for i in range(n)])}")
    for label in ("minipipe gpipe", "minipipe 1f1b"):
        row = rows.get(label)
        if not row or not row.records:
            continue
        errors, bubbles, overhead = [], [], []
        for plan, records in row.records:
            measured = trace_of(plan, records)
            predicted = simulate(plan.schedule, calibrate(measured))
            errors.append(predicted.makespan / measured.makespan - 1)
            bubbles.append((measured.bubble(), predicted.bubble()))
            acts = len(measured.rank_events(0))
            overhead.append(1000 * (measured.makespan - measured.busy(0) - measured.wait_time(0)) / acts)
        out.append(f"{label}: simulated makespan vs measured {_spread([100 * e for e in errors])} % "
                   f"(bubble measured {statistics.median(b for b, _ in bubbles):.1%}, simulated "
                   f"{statistics.median(s for _, s in bubbles):.1%}); rank 0 outside actions and waits "
                   f"{statistics.median(overhead):.0f} µs per action")
    return out
