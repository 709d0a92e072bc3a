"""The asynchronous kinds, PipeDream and PipeDream-2BW: 1F1B over several steps with no flush.

A flushed kind runs one step, waits until every micro-batch is through (the flush), and updates
the weights once: the same weights for every micro-batch, the unsplit model's math, and a bubble
every step. These two never wait: the next step's warm-up runs in this step's cool-down, one 1F1B
over all steps' micro-batches, and each stage updates its weights while other micro-batches are
in flight (updates.py says when, and which version each micro-batch uses):

    pipedream      (Narayanan et al., SOSP 2019) every stage updates after every backward, with that
                   micro-batch's gradient; a forward takes the newest weights and stashes them for its
                   backward, so rank r keeps up to p − r versions and is p − 1 − r updates stale.
    pipedream-2bw  (Narayanan et al., ICML 2021) the step's m gradients summed, one update per step;
                   every micro-batch of step t uses the version made from step t − 2's gradients, so
                   every stage is one step stale and keeps two versions (double buffering). It needs
                   m ≥ p − 1: a step's first forward on rank 0 runs p − 1 forwards ahead of its
                   backwards, and needs the version the step before last's last backward makes (the
                   paper asks m ≥ d, the depth, "for simplicity").

Neither gives the unsplit model's losses: the math is the papers' update rule, not synchronous
training (tests/engine/test_async_reference.py holds each to a one-process reference of its rule).
`repeated` writes any flushed kind's step several times over, for the simulator to draw side by
side with them; the engine runs a flushed kind one step at a time, as always.

The formulas (uniform costs f, b per micro-batch, free communication), for kinds.py's registry and
theory.py; tests/schedule/test_async_schedules.py checks them against the simulator over p, m and steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .generators import one_f_one_b
from .ir import Schedule
from .ops import Action
from .updates import Updates

DEFAULT_STEPS = 3  # a run long enough to show a step's warm-up in the last one's cool-down


@dataclass(frozen=True)
class NoFlush:
    """What a kind without a flush adds to the registry: its update rule and its formulas over a run
    of `steps` training steps of m micro-batches (a step alone has no makespan: steps overlap)."""

    rule: str  # updates.RULES
    makespan: Callable[[int, int, int, float, float], float]  # (p, m, steps, f, b) -> the run's time
    peak_inflight: Callable[[int, int, int, int], int]  # (p, m, steps, rank) -> micro-batches held at the peak
    weight_versions: Callable[[int, int, int, int], int]  # (p, m, steps, rank) -> weight versions held at the peak
    staleness: Callable[[int, int, int], int]  # (p, m, rank) -> updates a gradient's weights are behind
    default_steps: int = DEFAULT_STEPS


def repeated(step: Schedule, steps: int) -> Schedule:
    """A flushed step `steps` times over, micro-batches numbered on (step t holds t·m .. t·m + m − 1),
    each step updating the weights once at its end: what a flushed run does, as one schedule."""
    m = step.m
    lists = [
        [Action(a.op, a.stage, None if a.mb is None else a.mb + t * m) for t in range(steps) for a in acts]
        for acts in step.actions
    ]
    paired = [(r, i + t * len(step.actions[r])) for t in range(steps) for r, i in step.paired]
    return Schedule.build(step.kind, step.p, m * steps, step.v, lists, step.placement, paired, Updates("flush", m))


def pipedream(p: int, m: int, steps: int = DEFAULT_STEPS) -> Schedule:
    """PipeDream's 1F1B with weight stashing: one 1F1B over all steps' micro-batches, no flush."""
    return _no_flush("pipedream", "pipedream", p, m, steps)


def pipedream_2bw(p: int, m: int, steps: int = DEFAULT_STEPS) -> Schedule:
    """PipeDream-2BW: the same order, one update per step of m micro-batches, one step stale."""
    return _no_flush("pipedream-2bw", "2bw", p, m, steps)


def _no_flush(kind: str, rule: str, p: int, m: int, steps: int) -> Schedule:
    order = one_f_one_b(p, m * steps)
    return Schedule.build(kind, p, m * steps, 1, order.actions, updates=Updates(rule, m))


# -- the formulas ---------------------------------------------------------------------------
def makespan(p: int, m: int, steps: int, f: float, b: float) -> float:
    """One fill and one drain for the whole run: (steps·m + p − 1)·(f + b); a flushed kind pays
    its p − 1 slots every step."""
    return (steps * m + p - 1) * (f + b)


def peak_inflight(p: int, m: int, steps: int, rank: int) -> int:
    """1F1B's: rank r holds at most p − r micro-batches, however many steps run."""
    return min(p - rank, steps * m)


def pipedream_versions(p: int, m: int, steps: int, rank: int) -> int:
    """Each forward stashes the newest weights, so rank r keeps one version per micro-batch in
    flight: p − r in the steady state (its p − 1 − r warm-up forwards share version 0); a run of
    fewer than 2(p − 1 − r) micro-batches never fills that, and the last stage keeps one."""
    w, n = p - 1 - rank, steps * m
    if w == 0 or n == 1:
        return 1
    return min(w + 1, max(2, n - w + 1))


def two_bw_versions(p: int, m: int, steps: int, rank: int) -> int:
    """Two from the second step on: the version step t uses, and the one step t + 1 will."""
    return min(2, steps)


def pipedream_staleness(p: int, m: int, rank: int) -> int:
    """Rank r's gradient is applied p − 1 − r updates (micro-batches) after its weights were made."""
    return p - 1 - rank


def two_bw_staleness(p: int, m: int, rank: int) -> int:
    """One update (one step) on every rank: W(t+1) = W(t) − ν·∇f(W(t−1))."""
    return 1


def m_at_least_p_minus_1(p: int, m: int, v: int) -> str | None:
    if m >= p - 1:
        return None
    return (
        f"m (micro-batches per step) must be at least p − 1 = {p - 1}: a step's first forward on rank 0 runs p − 1 "
        f"forwards ahead of its backwards and uses the weights made from the step before last, which only that "
        f"step's last backward on rank 0 makes; got m={m}, use m={p - 1} or more (the paper takes m ≥ p)"
    )


PIPEDREAM = NoFlush("pipedream", makespan, peak_inflight, pipedream_versions, pipedream_staleness)
TWO_BW = NoFlush("2bw", makespan, peak_inflight, two_bw_versions, two_bw_staleness)
