"""The textbook numbers, as functions, so lessons can print them beside a simulation or a run.

p ranks, m micro-batches, v stages per rank. f and b are a rank's share of the model's forward
and backward time for one micro-batch (w: the weight-gradient part of b), whatever v is: with v
chunks per rank, each chunk costs f/v and b/v. Each kind's formulas are declared with the kind in
kinds.py (the built-in kinds' step times are written in makespans.py); a kind registered without
them has none, and these functions say so with a ValueError rather than guess.
tests/sim/test_simulate.py checks every formula against the simulator.

The asynchronous kinds (PipeDream, PipeDream-2BW: no flush) have no step of their own: their
formulas are over a run of steps, `run_makespan`, `throughput`, `weight_versions`, `staleness`,
which take any kind (a flushed kind's run is its steps end to end, one weight version, no
staleness); tests/schedule/test_async_schedules.py checks them against the simulator.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from . import kinds


def _formula(kind: str, which: str) -> tuple[kinds.Kind, Callable[..., Any]]:
    k = kinds.get(kind)
    fn = getattr(k, which)
    if fn is None and k.asynchronous is not None:
        raise ValueError(
            f"{k.name} has no flush, so a step has no {which.replace('_', ' ')} of its own: the next step "
            f"starts in this one's cool-down. Ask for a run of steps: theory.run_makespan, throughput, "
            f"weight_versions, or peak_inflight(..., steps=)"
        )
    if fn is None:
        raise ValueError(
            f"the schedule kind {k.name!r} has no textbook {which.replace('_', ' ')} formula; "
            f"simulate it instead (minipipe.sim.pipeline)"
        )
    return k, fn


def makespan(
    kind: str,
    p: int,
    m: int,
    v: int | None = None,
    f: float = 1.0,
    b: float = 2.0,
    w: float | None = None,
    overlap: float = 0.0,
) -> float:
    """Step time with uniform costs and free communication. For the fill-and-drain kinds it is
    (m + (p−1)/v)·(f+b): m micro-batches of work per rank, plus p−1 fill-and-drain slots, each a
    chunk long. zb-h1's W's fill the cool-down, so only f + b − 2w of each slot stays idle (that
    needs m >= p and w <= min(f, b − w)); zb-v's chunks are half as long, and so is its idle.
    `overlap` (sim.pipeline.Costs.overlap) is for kinds that pair a forward with a backward
    (dualpipe-v); the others do not pair, and it changes nothing for them."""
    k, fn = _formula(kind, "makespan")
    k, v = kinds.check(k, p, m, v)
    _check_costs(f, b)
    pairs = "overlap" in inspect.signature(fn).parameters
    span: float = fn(p, m, v, f, b, w, overlap=overlap) if pairs else fn(p, m, v, f, b, w)
    return span


def _check_costs(f: float, b: float) -> None:
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in (f, b)) or f + b == 0:
        raise ValueError(
            f"f and b are a micro-batch's forward and backward times, finite and >= 0 with some work "
            f"between them; got f={f!r}, b={b!r}" + (" (f and b are both 0)" if f == b == 0 else "")
        )


def bubble_fraction(
    kind: str, p: int, m: int, v: int | None = None, f: float = 1.0, b: float = 2.0, w: float | None = None
) -> float:
    """Idle share of all ranks' time: 1 − m·(f+b) / makespan, since each rank works m·(f+b).

    naive (p−1)/p; gpipe, 1f1b (p−1)/(m+p−1); interleaved (p−1)/(v·m+p−1); zb-h1 depends on the
    costs. `kinds.get(kind).bubble_formula` gives each as text."""
    return 1 - m * (f + b) / makespan(kind, p, m, v, f, b, w)


def bubble_ratio(
    kind: str, p: int, m: int, v: int | None = None, f: float = 1.0, b: float = 2.0, w: float | None = None
) -> float:
    """The other common definition: idle time over ideal (bubble-free) time, (p−1)/m for 1F1B,
    as in the Ultra-Scale Playbook and Megatron's paper. Equal to bubble / (1 − bubble)."""
    return makespan(kind, p, m, v, f, b, w) / (m * (f + b)) - 1


def peak_inflight(kind: str, p: int, m: int, rank: int, v: int | None = None, steps: int | None = None) -> int:
    """Micro-batches whose activations `rank` holds at its peak (stage chunks when v > 1).

    GPipe holds all m; 1F1B holds at most p − rank (the warm-up forwards plus one); the
    interleaved warm-up is (p − rank − 1)·2 + (v − 1)·p chunks, plus one; ZB-H1 holds p on
    every rank (a micro-batch's activations stay until its W). On the V placement a chunk is half
    a rank's share: ZB-V holds 2p chunks (1F1B's first rank's p micro-batches), DualPipe-V 2p + 1;
    breadth-first holds all m·v, as GPipe does. PipeDream and PipeDream-2BW hold 1F1B's p − rank,
    over a run of `steps` (default: the kind's default_steps)."""
    k = kinds.get(kind)
    if (no_flush := k.asynchronous) is not None:
        k, _ = kinds.check(k, p, m, v)
        return no_flush.peak_inflight(p, m, _steps(k, steps), rank)
    k, fn = _formula(kind, "peak_inflight")
    k, v = kinds.check(k, p, m, v)
    held: int = fn(p, m, v, rank)
    return held


def ideal_step_time(one_process: float, p: int, m: int, v: int = 1) -> float:
    """The best a pipeline can do on p ranks, given the time one process takes to run the same
    m micro-batches one after another: its work split p ways plus the fill-and-drain bubble, the
    fill-and-drain kinds' own makespan formula (makespans.py) at a rank's share of that time."""
    fill_and_drain = kinds.get("interleaved").makespan
    assert fill_and_drain is not None  # registered with it
    return fill_and_drain(p, m, v, one_process / (p * m), 0.0, None)


# -- runs of several steps: what a flush costs, and what doing without one keeps -----------------
def _steps(k: kinds.Kind, steps: int | None) -> int:
    steps = k.asynchronous.default_steps if steps is None and k.asynchronous is not None else steps or 1
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    return steps


def run_makespan(
    kind: str, p: int, m: int, steps: int, v: int | None = None, f: float = 1.0, b: float = 2.0, w: float | None = None
) -> float:
    """The time of `steps` training steps of m micro-batches (uniform costs, free communication, the
    optimizer's step taken as free): a flushed kind's steps end to end, steps·makespan; PipeDream and
    PipeDream-2BW fill and drain once, (steps·m + p − 1)·(f + b)."""
    k = kinds.get(kind)
    steps = _steps(k, steps)
    if k.asynchronous is None:
        return steps * makespan(kind, p, m, v, f, b, w)
    kinds.check(k, p, m, v)
    _check_costs(f, b)
    return k.asynchronous.makespan(p, m, steps, f, b)


def run_bubble_fraction(
    kind: str, p: int, m: int, steps: int, v: int | None = None, f: float = 1.0, b: float = 2.0, w: float | None = None
) -> float:
    """Idle share of all ranks' time over a run of `steps` steps: 1 − steps·m·(f+b) / run_makespan.
    A flushed kind's is its step's; PipeDream's and 2BW's (p−1)/(steps·m+p−1), one fill and drain."""
    return 1 - steps * m * (f + b) / run_makespan(kind, p, m, steps, v, f, b, w)


def throughput(
    kind: str, p: int, m: int, steps: int, v: int | None = None, f: float = 1.0, b: float = 2.0, w: float | None = None
) -> float:
    """Micro-batches a run of `steps` steps trains per unit of time: steps·m / run_makespan."""
    return steps * m / run_makespan(kind, p, m, steps, v, f, b, w)


def weight_versions(kind: str, p: int, m: int, rank: int, steps: int | None = None) -> int:
    """Versions of its weights `rank` holds at its peak: one for a flushed kind; PipeDream-2BW two
    (from the second step); PipeDream one per micro-batch in flight, p − rank in the steady state."""
    k, _ = kinds.check(kind, p, m)
    if k.asynchronous is None:
        return 1
    return k.asynchronous.weight_versions(p, m, _steps(k, steps), rank)


def staleness(kind: str, p: int, m: int, rank: int) -> int:
    """Updates between the weights a gradient is computed with and those it is applied to, in the
    steady state: 0 for a flushed kind; PipeDream p − 1 − rank (one update per micro-batch);
    PipeDream-2BW 1 (one step) on every rank."""
    k, _ = kinds.check(kind, p, m)
    return 0 if k.asynchronous is None else k.asynchronous.staleness(p, m, rank)
