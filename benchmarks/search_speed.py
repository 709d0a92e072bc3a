"""Schedules found by search against the hand-written kinds, and how long the search takes.

Part 1, for each size: every hand-written kind's makespan and peak (micro-batches' activations on its
fullest rank), then, for each memory cap, the search's best (which candidate it was), the heuristic's
own best, and the optimum where the exact search (a MILP) finishes within its time limit. Part 2: the
search's time as p and m grow (the heuristic alone, and with the exact search where it is small).
Costs: forward 1, backward 2 with a weight gradient of 1 (F = I = W, the zero-bubble paper's case).
Prints figures only; `--quick` is CI's short form (seconds).
"""

import math
import sys
import time

from minipipe import Costs
from minipipe.schedule import milp
from minipipe.schedule.search import hand_written, search

COSTS = Costs(forward=1.0, backward=2.0, weight=1.0)


def cell(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:g}"


def compare(p: int, m: int, caps, exact: bool, time_limit: float) -> None:
    print(f"\np={p} m={m}: the hand-written kinds (makespan, peak micro-batches on the fullest rank)")
    for t in hand_written(p, m, COSTS):
        print(f"  {t.name:<12} {t.makespan:>7g} {t.peak:>6g}")
    print(
        f"  {'cap':>5} | {'best found':>10} {'peak':>5}  {'which':<22} | {'heuristic':>9} | {'optimum':>7}"
        f" | {'best kind that fits':<22} | search s"
    )
    for cap in caps:
        found = search(p, m, COSTS, cap, exact=exact and milp.available(), time_limit=time_limit)
        kinds = [t for t in found.tried if t.fits and not t.name.startswith(("heuristic", "optimum", "MILP"))]
        best_kind = min(kinds, key=lambda t: t.makespan, default=None)
        optimum = found.optimum if found.optimum is not None else None
        bound = "" if optimum is not None or found.bound is None else f" (≥ {found.bound:.3g})"
        print(
            f"  {cell(cap):>5} | {found.makespan:>10g} {max(found.peak):>5g}  {found.how:<22} | "
            f"{cell(found.heuristic):>9} | {cell(optimum):>7}{bound} | "
            f"{(f'{best_kind.name} {best_kind.makespan:g}' if best_kind else 'none fits'):<22} | {found.seconds:.2f}"
        )


def timing(sizes, exact: bool) -> None:
    print(f"\nthe search's time (cap p micro-batches; {'with' if exact else 'without'} the exact search)")
    for p, m in sizes:
        t0 = time.perf_counter()
        found = search(p, m, COSTS, p, exact=exact and milp.available(), time_limit=60)
        print(f"  p={p:<2} m={m:<3} {time.perf_counter() - t0:7.2f} s   best {found.makespan:g} ({found.how})")


def main(quick: bool = False) -> None:
    if quick:
        compare(2, 3, (1, 2, None), exact=True, time_limit=10)
        timing([(2, 4), (4, 8)], exact=False)
        return
    compare(2, 3, (1, 1.5, 2, None), exact=True, time_limit=60)
    compare(3, 3, (1, 1.5, 2, 3, None), exact=True, time_limit=60)
    compare(4, 8, (1, 2, 3, 4, 5, 8, None), exact=False, time_limit=60)
    timing([(2, 4), (4, 4), (4, 8), (4, 16), (8, 8), (8, 16), (8, 32)], exact=False)
    timing([(2, 2), (2, 3), (3, 2), (3, 3), (2, 4)], exact=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
