"""The ranking for people and for scripts: the table `minipipe plan` prints (the best cuts, the
closest misses with their memory by kind, what would fit when nothing does, what was left out),
a given layout's place and why, JSON, and the assumptions printed with every answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .prediction import Row
from .setup_and_layout import GiB, Setup

if TYPE_CHECKING:  # the search's result type, for the checker
    from .search import Layouts

PARTS = (
    "compute",
    "tp collectives",
    "cp and zero collectives",
    "pipeline idle (bubble, messages)",
    "dp exposed",
    "optimizer step",
)


def parts(row: Row) -> dict[str, float]:
    """A row's step, in seconds, by where it goes (they add up to row.step)."""
    inside = row.comm["cp"] + row.comm["zero"] + row.comm.get("ep", 0.0)
    idle = row.pipeline - row.compute - row.comm["tp"] - inside
    return dict(zip(PARTS, (row.compute, row.comm["tp"], inside, idle, row.comm["dp exposed"], row.optimizer)))


def assumptions(setup: Setup) -> list[str]:
    eff = setup.efficiencies
    if eff.memory is None:
        compute = f"every FLOP at {eff.gemm:.3f} of the GPU's peak, memory traffic not priced ({eff.source})"
    else:
        compute = (
            f"matmuls at {eff.gemm:.2f} of peak plus their reads and writes, element-wise work, attention's "
            f"softmax and the optimizer step at {eff.memory:.2f} of the memory bandwidth ({eff.source})"
        )
    return [
        compute,
        f"collectives are rings at the slowest link's achieved bandwidth (NVLink × {eff.nvlink:.2f}, network × "
        f"{eff.network:.2f}), no contention between groups, latency {setup.latency:g} s per step",
        "tensor-parallel collectives "
        + (
            "hidden behind the matmuls next to them"
            if setup.tp_overlap
            else "not overlapped (each action lasts its compute and its collectives)"
        ),
        "gradient reduction "
        + (
            "bucket by bucket during each rank's last backward, parameter all-gathers during the first forwards"
            if setup.dp_overlap
            else "after the whole pipeline"
        )
        + "; ZeRO 2/3 collectives per micro-batch, hidden behind its compute where shorter",
        f"memory: ZeRO's bytes per parameter, activations after Korthikanti et al. 2022 (micro-batches in "
        f"flight by the schedule); {setup.memory_reserve:.0%} of each GPU kept free for what is not counted "
        f"(CUDA context, NCCL buffers, fragmentation, workspaces)",
        "not modelled: data loading, contention between groups, stragglers"
        + ("" if setup.experts else ", expert parallelism (a dense model)"),
    ] + (
        [
            "mixture of experts: compute and activations of one token's path (the dense equivalent, routing "
            "even), each expert's matmuls as large as the dense equivalent's; each MoE block's all-to-alls "
            "(dispatch, combine and their gradients) exposed, none hidden under compute (DualPipe's overlap is "
            "not priced) and priced on the ep group's slowest link; attention as multi-head (latent attention "
            "not modelled)"
        ]
        if setup.experts
        else []
    )


def header(setup: Setup) -> str:
    s = setup
    return (
        f"{s.model.name} on {s.gpus} × {s.gpu.name} ({s.node} per node), global batch {s.batch} × {s.model.seq} "
        f"tokens, {s.precision}, {s.optimizer}; fits: at most {s.usable / GiB:.1f} of {s.gpu.memory / GiB:.1f} GiB"
    )


COLUMNS = (
    f"{'#':>3}  {'layout':<20}{'b':>3}{'m':>6}  {'schedule':<17}{'recompute':<10}{'zero':>4}{'step s':>9}"
    f"{'TFLOP/s':>9}{'MFU':>6}{'bubble':>8}{'tp s':>7}{'pp s':>7}{'dp s':>7}  "
    f"{'GiB: params grads optim activ = total':<40}"
)


def line(i: int, r: Row) -> str:
    lay, mem = r.layout, r.memory
    gib = " ".join(f"{mem[k] / GiB:5.1f}" for k in ("parameters", "gradients", "optimizer", "activations"))
    mark = {"simulated": "s", "closed form (close)": "≈"}.get(r.timed, " ")
    return (
        f"{i:>3}  {lay.label():<20}{lay.micro_batch:>3}{lay.m:>6}  {lay.schedule_label():<17}{lay.recompute:<10}"
        f"{lay.zero:>4}{r.step:>8.2f}{mark}{r.tflops:>9.1f}{r.mfu:>6.0%}{r.bubble:>8.1%}{r.comm['tp']:>7.2f}"
        f"{r.comm['pp']:>7.2f}{r.comm['dp']:>7.2f} ({r.comm['dp exposed']:.2f})  {gib} = {r.total_memory / GiB:5.1f}"
        + (f"{r.comm['ep']:>7.2f}" if "ep" in r.comm else "")
    )


def miss_line(r: Row) -> str:
    lay = r.layout
    return (
        f"  {lay.label()} b={lay.micro_batch} {lay.schedule_label()} recompute {lay.recompute} zero {lay.zero}: "
        f"{r.why()}" + (f" [{r.note}]" if r.note else "")
    )


def table(result: Layouts, top: int = 10, misses: int = 3, every: bool = False) -> str:
    """A search's ranking (search.Layouts) as text."""
    s = result.setup
    shown = result.rows if every else result.distinct()
    lines = [
        header(s),
        f"{len(result.rows)} layouts fit ({len(result.distinct())} ways to cut the GPUs), "
        f"{result.considered - len(result.rows)} do not; fastest first"
        + ("" if every else ", the best of each cut")
        + ":",
        "",
        COLUMNS + ("   ep s" if s.experts else ""),
    ]
    lines += [line(i, r) for i, r in enumerate(shown[:top], 1)]
    if not result.rows:
        lines.append("  (nothing fits: the closest misses and what would fit follow)")
    if result.misses and (misses or not result.rows):
        lines += ["", "closest misses (do not fit):"] + [miss_line(r) for r in result.misses[: max(misses, 3)]]
    if result.suggestions:
        lines += ["", "what would fit:"] + [f"  - {x}" for x in result.suggestions]
    if result.skipped:
        lines += ["", "left out before predicting: " + "; ".join(f"{n} × {why}" for why, n in result.skipped.items())]
    lines += [
        "",
        "step s: ≈ timed by a closed form that is close (within a few per cent), s replayed by the simulator; "
        "tp s: tensor-parallel collectives per step; pp s: what messages between stages add; dp s: the "
        "step-end gradient reduction (the part that adds to the step in brackets)"
        + ("; ep s: the experts' all-to-alls per step." if s.experts else "."),
        "assumptions:",
    ]
    lines += [f"  - {a}" for a in assumptions(s)]
    return "\n".join(lines)


def explain(result: Layouts, row: Row) -> str:
    """A given layout's prediction, its place in the ranking, and where its step differs from the best's."""
    lay = row.layout
    out = [
        f"{lay.describe()}:",
        f"  step {row.step:.2f} s ({row.timed}), {row.tflops:.1f} TFLOP/s per GPU, MFU "
        f"{row.mfu:.1%}, bubble {row.bubble:.1%}",
        "  memory of its fullest GPU: "
        + ", ".join(f"{k} {v / GiB:.1f}" for k, v in row.memory.items())
        + f" = {row.total_memory / GiB:.1f} GiB of {row.usable / GiB:.1f} usable",
    ]
    if not row.fits:
        out.append(f"  it does not fit: {row.why()}" + (" (it would without the memory reserve)" if row.tight else ""))
    if not result.rows:
        return "\n".join(out + ["  nothing fits this setup to compare it with"])
    best = result.rows[0]
    place, cut = result.place(row)
    out.append(
        f"  place {place} of {len(result.rows) + (0 if row in result.rows or not row.fits else 1)} fitting rows, "
        f"cut {cut} of {len(result.distinct())}"
        if row.fits
        else "  (not ranked: it does not fit)"
    )
    if best.layout == row.layout:
        return "\n".join(out + ["  it is the planner's best"])
    out.append(f"  the best: {best.layout.describe()}, {best.step:.2f} s: yours takes {row.step / best.step - 1:+.1%}")
    mine, theirs = parts(row), parts(best)
    diffs = sorted(((mine[k] - theirs[k], k) for k in PARTS), key=lambda x: -abs(x[0]))
    out += [
        f"    {k}: {mine[k]:.2f} s against {theirs[k]:.2f} s ({d:+.2f} s)"
        for d, k in diffs
        if abs(d) > 1e-3 * best.step
    ]
    return "\n".join(out)


def as_json(result: Layouts, top: int = 10, given: Row | None = None) -> dict[str, Any]:
    """The ranking for scripts: setup, the best rows, the closest misses, what would fit, assumptions."""
    s = result.setup
    out = {
        "setup": {
            "model": s.model.name,
            "gpus": s.gpus,
            "gpu": s.gpu.name,
            "gpus_per_node": s.node,
            "batch": s.batch,
            "seq": s.model.seq,
            "precision": s.precision,
            "optimizer": s.optimizer,
            "memory_reserve": s.memory_reserve,
            "usable_bytes": s.usable,
        },
        "fits": bool(result.rows),
        "considered": result.considered,
        "predicted": result.predicted,
        "rows": [r.as_dict() for r in result.distinct()[:top]],
        "misses": [{**r.as_dict(), "why": r.why(), "note": r.note} for r in result.misses[:top]],
        "suggestions": result.suggestions,
        "skipped": result.skipped,
        "assumptions": assumptions(s),
    }
    if given is not None:
        place, cut = result.place(given)
        out["layout"] = {
            **given.as_dict(),
            "place": place if given.fits else None,
            "cut_place": cut if given.fits else None,
        }
    return out
