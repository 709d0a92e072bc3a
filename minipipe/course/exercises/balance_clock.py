"""Exercise 08's time bound: what the checker's own dynamic programme takes, timed where the
learner's `balance` runs. The check's harness calls `reference_seconds` in the sandbox, under the
exercise's watch (which slows plain Python some 60-fold), so it is on the exercise's list; it gives
away nothing but seconds. A module of its own, importing nothing of the checker (the checker imports
it, for `lightest`): the sandbox imports what the list names before the learner's cells run, and the
checker module must not be there already, for a cell that imports it is refused."""

from __future__ import annotations

import itertools
import time


def reference_seconds(costs, p) -> float:
    """Seconds the checker's dynamic programme (lightest, below) takes to cut `costs` into p stages."""
    costs = list(costs)
    start = time.perf_counter()
    lightest(costs, p)
    return time.perf_counter() - start


def lightest(costs, p: int) -> tuple[float, tuple[int, ...]]:
    """The same optimum by dynamic programming, in p·n² steps: best[s][j] is the lightest slowest
    stage of layers 0..j−1 cut into s stages, the last of them layers i..j−1 for the best i."""
    n = len(costs)
    prefix = list(itertools.accumulate(costs, initial=0.0))
    best = [[float("inf")] * (n + 1) for _ in range(p + 1)]
    start = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for s in range(1, p + 1):
        for j in range(s, n - (p - s) + 1):
            for i in range(s - 1, j):
                slowest = max(best[s - 1][i], prefix[j] - prefix[i])
                if slowest < best[s][j]:
                    best[s][j], start[s][j] = slowest, i
    bounds = [n]
    for s in range(p, 0, -1):
        bounds.append(start[s][bounds[-1]])
    bounds = tuple(reversed(bounds))
    return max(stage_costs(costs, bounds)), bounds


def stage_costs(costs, bounds) -> list[float]:
    """What each stage of the cut costs: the sum of exactly its layers' costs."""
    return [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])]
