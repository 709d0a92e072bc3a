"""The ranking as text, for people: the table `minipipe plan` prints, the closest misses, what
was left out before predicting, and the assumptions, printed with every answer."""
from __future__ import annotations

from .evaluate import Row
from .layout import GiB
from .shapes import KINDS

ASSUMPTIONS = (
    "compute runs at `efficiency` × the GPU's peak, the same for every layer and op",
    "tensor-parallel all-reduces are not overlapped with compute (each action lasts compute + its collectives)",
    "collectives are rings at the slowest link's bandwidth (NVLink inside a node, the GPU's network card "
    "between nodes), no contention between groups, latency 0 unless given",
    "dp gradient all-reduce starts when a rank's last backward ends (overlapping the cool-down); with the "
    "distributed optimizer a reduce-scatter and an all-gather, the same bytes",
    "the optimizer step, data loading, the embedding's and the loss's own collectives are not timed; ZeRO 2/3, "
    "context and expert parallelism and zero-bubble schedules are not searched",
    "memory: model state by ZeRO's bytes per parameter, activations after Korthikanti et al. 2022 (micro-batches "
    "in flight by the schedule); workspace, fragmentation and communication buffers are not counted",
)


def table(result, top: int = 10, misses: int = 3, every: bool = False) -> str:
    """A search's ranking (search.Layouts) as text."""
    s = result.setup
    head = (f"{s.model.name} on {s.gpus} × {s.gpu.name} ({s.node} per node), global batch {s.batch} × "
            f"{s.model.seq} tokens, {s.precision}, {s.optimizer}"
            + (" (distributed)" if s.distributed_optimizer else "")
            + f", compute at {s.achieved:.3f} of {s.gpu.peak / 1e12:.0f} TFLOP/s"
            + (" (default: see minipipe.planner.published)" if s.efficiency is None else ""))
    shown = result.rows if every else result.distinct()
    lines = [head, f"{len(result.rows)} layouts fit ({len(result.distinct())} ways to cut the GPUs), "
                   f"{len(result.misses)} do not; fastest first" + ("" if every else ", the best of each tp·pp·dp")
             + ":", ""]
    lines.append(f"{'#':>3}  {'layout':<17}{'b':>3}{'m':>6}  {'schedule':<17}{'recompute':<10}{'step s':>8}"
                 f"{'TFLOP/s':>9}{'MFU':>6}{'bubble':>8}{'tp s':>7}{'pp s':>7}{'dp s':>7}  "
                 f"{'GiB: params grads optim activ = total':<40}")
    for i, r in enumerate(shown[:top], 1):
        lines.append(_line(i, r))
    if not result.rows:
        lines.append("  (none fits: see the closest misses)")
    if result.misses and misses:
        lines += ["", "closest misses (do not fit):"]
        for r in result.misses[:misses]:
            lay = r.layout
            lines.append(f"  {lay.label()} b={lay.micro_batch} {lay.schedule_label()} recompute {lay.recompute}: {r.why()}")
    if result.skipped:
        lines += ["", "left out before predicting: " + "; ".join(f"{n} × {why}" for why, n in result.skipped.items())]
    lines += ["", "tp s: tensor-parallel all-reduces per step; pp s: what messages between stages add; dp s: the "
                  "gradient all-reduce (exposed part in brackets).", "assumptions:"]
    lines += [f"  - {a}" for a in ASSUMPTIONS]
    return "\n".join(lines)


def _line(i: int, r: Row) -> str:
    lay, mem = r.layout, r.memory
    gib = " ".join(f"{mem[k] / GiB:5.1f}" for k in KINDS)
    return (f"{i:>3}  {lay.label():<17}{lay.micro_batch:>3}{lay.m:>6}  {lay.schedule_label():<17}{lay.recompute:<10}"
            f"{r.step:>8.2f}{r.tflops:>9.1f}{r.mfu:>6.0%}{r.bubble:>8.1%}{r.comm['tp']:>7.2f}{r.comm['pp']:>7.2f}"
            f"{r.comm['dp']:>7.2f} ({r.comm['dp exposed']:.2f})  {gib} = {r.total_memory / GiB:5.1f}")
