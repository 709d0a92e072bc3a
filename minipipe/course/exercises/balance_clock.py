"""Exercise 08's time bound: what the checker's own dynamic programme takes, timed where the
learner's `balance` runs. The check's harness calls `reference_seconds` in the sandbox, under the
exercise's watch (which slows plain Python some 60-fold), so it is on the exercise's list; it gives
away nothing but seconds. A module of its own, importing the checker only when called: the sandbox
imports what the list names before the learner's cells run, and the checker module must not be there
already, for a cell that imports it is refused."""
from __future__ import annotations

import time


def reference_seconds(costs, p) -> float:
    """Seconds the checker's dynamic programme (balance.lightest) takes to cut `costs` into p stages."""
    from .balance import lightest

    costs = list(costs)
    start = time.perf_counter()
    lightest(costs, p)
    return time.perf_counter() - start
