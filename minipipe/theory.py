"""The textbook numbers, as functions, so lessons can print them beside a simulation or a run.

p ranks, m micro-batches, v stages per rank; f and b are one stage's forward and backward time
for one micro-batch (with v > 1, one chunk's). tests/test_simulate.py checks each formula
against the simulator.
"""
from __future__ import annotations

from .schedule import ALIASES, GENERATORS


def _kind(kind: str) -> str:
    name = ALIASES.get(kind.lower(), kind.lower())
    if name not in GENERATORS:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(GENERATORS)}")
    return name


def bubble_fraction(kind: str, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0,
                    w: float | None = None) -> float:
    """Idle share of all ranks' time.

    naive: only one rank works at a time, so (p-1)/p.
    gpipe, 1f1b: the fill and drain cost p-1 slots out of m+p-1: (p-1)/(m+p-1).
    interleaved: slots are v times shorter, so (p-1)/(v·m+p-1) (m a multiple of p).
    zb-h1: depends on the costs: (p-1)(f+b-2w) / (m(f+b) + (p-1)(f+b-2w)); see makespan.
    """
    kind = _kind(kind)
    if kind == "zb-h1":
        span = makespan(kind, p, m, v, f, b, w)
        return 1 - m * (f + b) / span
    if kind == "naive":
        return (p - 1) / p
    if kind == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (m + p - 1)


def makespan(kind: str, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, w: float | None = None) -> float:
    """Step time with uniform per-stage costs and free communication. b is the whole backward;
    for zb-h1, w is its weight-gradient part (default b/2): the W's fill the cool-down, so
    only f + b - 2w of each of the p-1 fill/drain slots stays idle. That needs m >= p and
    w <= min(f, b - w), or the W's don't fit the gaps."""
    kind = _kind(kind)
    if kind == "zb-h1":
        w = b / 2 if w is None else w
        if m < p or w > f or w > b - w:
            raise ValueError(f"the zb-h1 formula holds for m >= p and w <= min(f, b - w); "
                             f"got p={p}, m={m}, f={f}, b={b}, w={w}")
        return m * (f + b) + (p - 1) * (f + b - 2 * w)
    if kind == "naive":
        return p * m * (f + b)
    slots = v * m if kind == "interleaved" else m
    return (slots + p - 1) * (f + b)


def peak_inflight(kind: str, p: int, m: int, rank: int, v: int = 1) -> int:
    """Micro-batches whose activations `rank` holds at its peak (stage chunks when v > 1).

    GPipe holds all m; 1F1B holds at most p - rank (the warm-up forwards plus one); the
    interleaved warm-up is (p - rank - 1)·2 + (v - 1)·p chunks, plus one; ZB-H1 holds p on
    every rank (a micro-batch's activations stay until its W).
    """
    kind = _kind(kind)
    if kind == "naive":
        return 1
    if kind == "zb-h1":
        return min(p, m)          # rank r: p - r in flight as in 1F1B, plus r W's held back
    if kind == "gpipe":
        return m
    if kind == "1f1b":
        return min(p - rank, m)
    return min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)


def ideal_step_time(one_process: float, p: int, m: int, v: int = 1) -> float:
    """The best a pipeline can do on p ranks, given the time one process takes to run the same
    m micro-batches one after another: its work split p ways plus the fill-and-drain bubble."""
    slots = m * v
    return one_process / p * (slots + p - 1) / slots
