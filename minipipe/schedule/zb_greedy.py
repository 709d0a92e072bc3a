"""The zero-bubble paper's automatic scheduling, as a greedy list scheduler under a memory cap.

Qi et al. 2024 ("Zero Bubble Pipeline Parallelism", ICLR 2024, §3.1) find a schedule for given
costs and a memory limit with a heuristic whose rules are, in their words: in the warm-up, schedule
as many forwards as the memory allows, to shrink the bubble before the first backward; then
alternate a forward and a backward (our I, the input gradient), inserting a W where the gap it
fills is at least its length; and when the memory limit is reached, insert W's, which free it. The
authors try each combination of a few such choices and keep the shortest (their
`initial_solution`, in sail-sg/zero-bubble-pipeline-parallelism's scheduler/zb.py).

This is that idea written for minipipe's IR, and for any placement (one stage per rank, the V, or
round robin with v chunks): the ranks are run forward in time, each choosing, whenever it is
free, among the three actions it could run next on each of its stages — its next F, its next I,
its next W (each stage takes each op in micro-batch order) — by these rules:

    1. an I whose inputs are here runs first (the stage before waits for it), or an F first, or
       the other of the two than the last one run (1F1B's alternation), as `Policy.first` says;
    2. an F whose input is here runs if its micro-batch fits under the rank's limit; a micro-batch
       entering the rank reserves room for all its chunks there (they are all held at once before
       its first backward on the rank), so that a tight cap can never wedge the pipeline;
    3. a W runs when an F is held back by memory (it frees some), or to fill an idle gap: only a
       gap it fits in (`w_fill="fits"`, the paper's rule) or any (`"always"`), or only once the rank
       has no F or I left (`"lazy"`: ZB-H1's W's, which wait until memory calls for them);
    4. otherwise the rank waits for the next input to arrive.

`Policy.limit` is the memory each rank may fill (at most the cap): a lower limit on some ranks is
1F1B's warm-up, a higher one the paper's ZB-H2. `candidates` lists the policies the search tries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .ops import BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action

EPS = 1e-9


@dataclass(frozen=True)
class Policy:
    limit: tuple[float, ...]  # per rank: the memory the greedy lets the rank hold
    first: str = "I"  # which runs first when both are ready: "I", "F", or "alt" (the other of the last)
    w_fill: str = "fits"  # a W fills a gap it fits in ("fits"), any gap ("always"), or runs only when
    # memory needs it or nothing else is left ("lazy", ZB-H1's W's)


@dataclass(frozen=True)
class Problem:
    """One search's fixed terms: p ranks, m micro-batches, `placement[s]` the rank of stage s,
    `cost[op][s]` each op's time on each stage, `comm[k]` a message's time across boundary k (from
    stage k to k + 1, or back) when the two stages live on different ranks, and `held[s]` what one
    micro-batch's activations weigh on stage s (in the cap's unit)."""

    p: int
    m: int
    v: int
    placement: tuple[int, ...]
    cost: dict
    comm: tuple[float, ...]
    held: tuple[float, ...]

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    def message(self, k: int) -> float:
        """The time of a message across boundary k, 0 where both stages share a rank."""
        return 0.0 if self.placement[k] == self.placement[k + 1] else self.comm[k]

    def least_cap(self) -> float:
        """What one micro-batch holds on the heaviest rank: all its chunks there are held at once
        (every forward of a micro-batch runs before its first backward), so no schedule needs less."""
        return max(sum(self.held[s] for s in self.stages_of(r)) for r in range(self.p))


def candidates(problem: Problem, caps: tuple[float, ...]) -> list[Policy]:
    """The policies the search tries: uniform limits from the least to the cap (no higher than 2p + 1
    micro-batches: ZB-H2 fills its bubble with 2p − 1), and two 1F1B-like staircases (rank r holds
    p − r micro-batches, or p − r + p − 1), each with either rule for I and F and for W. (Tried on 120
    random problems, these won all but the lazy W rule's ties, which is left out.)"""
    p = problem.p
    least = problem.least_cap()
    whole = [sum(problem.held[s] for s in problem.stages_of(r)) for r in range(p)]
    top = [min(c, (2 * p + 1) * max(whole), problem.m * max(whole)) for c in caps]
    levels = sorted({least * k for k in range(1, 2 * p + 2) if least * k <= max(top) + EPS} | {max(top)})
    limits = [tuple(min(level, t) for t in top) for level in levels]
    limits += [tuple(min(t, w * (p - r + extra)) for r, (w, t) in enumerate(zip(whole, top))) for extra in (0, p - 1)]
    out = []
    for limit in dict.fromkeys(limits):
        for first in ("I", "F", "alt"):
            for w_fill in ("fits", "always"):
                out.append(Policy(limit, first, w_fill))
    return out


class Stuck(Exception):
    """The greedy could not go on (no rank can run anything): a policy that cannot work here."""


def greedy(problem: Problem, policy: Policy) -> list[list[Action]]:
    """One list of actions per rank, every backward split into I and W, made by the rules above."""
    pr, m, n = problem, problem.m, problem.n_stages
    cost = pr.cost
    stages = [pr.stages_of(r) for r in range(pr.p)]
    entry = [min(ss) if ss else None for ss in stages]  # the chunk a micro-batch enters by
    whole = [sum(pr.held[s] for s in ss) for ss in stages]
    nxt = {op: [0] * n for op in (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)}
    end_f = [[None] * m for _ in range(n)]
    end_i = [[None] * m for _ in range(n)]
    free = [0.0] * pr.p
    committed = [0.0] * pr.p  # reserved at entry, released chunk by chunk at each W
    lists: list[list[Action]] = [[] for _ in range(pr.p)]
    remaining = [3 * m * len(ss) for ss in stages]
    blocked: set[int] = set()
    last = [BACKWARD_INPUT] * pr.p  # the last F or I each rank ran (for "alt")

    def ready(op, s, j):
        """When action (op, s, j)'s inputs are here; None while one is not scheduled yet."""
        if op == FORWARD:
            if s == 0:
                return 0.0
            t = end_f[s - 1][j]
            return None if t is None else t + pr.message(s - 1)
        if op == BACKWARD_INPUT:
            own = end_f[s][j]
            if s == n - 1:
                return own
            t = end_i[s + 1][j]
            return None if t is None else max(own, t + pr.message(s))
        return end_i[s][j]

    def run(r, op, s, t):
        j = nxt[op][s]
        start = max(t, ready(op, s, j))
        finish = start + cost[op][s]
        lists[r].append(Action(op, s, j))
        if op != BACKWARD_WEIGHT:
            last[r] = op
        nxt[op][s] += 1
        remaining[r] -= 1
        free[r] = finish
        if op == FORWARD:
            end_f[s][j] = finish
            if s == entry[r]:
                committed[r] += whole[r]
        elif op == BACKWARD_INPUT:
            end_i[s][j] = finish
        else:
            committed[r] -= pr.held[s]
        blocked.clear()

    while True:
        live = [r for r in range(pr.p) if remaining[r] and r not in blocked]
        if not live:
            if any(remaining):
                raise Stuck(f"no rank can go on under {policy}")
            return lists
        r = min(live, key=lambda q: (free[q], q))
        t = free[r]
        best_i = best_f = best_w = None
        arrivals = []
        held_back = False
        for s in stages[r]:
            j = nxt[BACKWARD_INPUT][s]
            if j < nxt[FORWARD][s]:
                at = ready(BACKWARD_INPUT, s, j)
                if at is not None and at <= t + EPS:
                    best_i = _older(best_i, (j, -s, s))
                elif at is not None:
                    arrivals.append(at)
            j = nxt[FORWARD][s]
            if j < m:
                at = ready(FORWARD, s, j)
                fits = s != entry[r] or committed[r] + whole[r] <= policy.limit[r] + EPS
                if at is not None and at <= t + EPS and fits:
                    best_f = _older(best_f, (j, -s, s))
                elif at is not None and fits:
                    arrivals.append(at)
                elif not fits:
                    held_back = True
            if nxt[BACKWARD_WEIGHT][s] < nxt[BACKWARD_INPUT][s]:
                best_w = _older(best_w, (nxt[BACKWARD_WEIGHT][s], s, s))
        pick = None
        i_first = policy.first == "I" or policy.first == "alt" and last[r] == FORWARD
        if best_i and (i_first or not best_f):
            pick = (BACKWARD_INPUT, best_i[2])
        elif best_f:
            pick = (FORWARD, best_f[2])
        elif best_w:
            gap = min(arrivals, default=math.inf) - t
            done = all(nxt[FORWARD][s] == m and nxt[BACKWARD_INPUT][s] == m for s in stages[r])
            if (
                held_back
                or done
                or policy.w_fill == "always"
                or policy.w_fill == "fits"
                and gap >= cost[BACKWARD_WEIGHT][best_w[2]] - EPS  # no arrival ahead: an endless gap
            ):
                pick = (BACKWARD_WEIGHT, best_w[2])
        if pick is not None:
            run(r, pick[0], pick[1], t)
            continue
        later = [free[q] for q in range(pr.p) if q != r and remaining[q] and free[q] > t + EPS] + arrivals
        if later:
            free[r] = min(later)  # wait for the next moment anything can change for this rank
        else:
            blocked.add(r)


def _older(best, new):
    """The older micro-batch first (it frees memory sooner), then the later stage."""
    return new if best is None or new < best else best
