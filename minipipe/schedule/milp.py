"""The exact search: the shortest schedule under a memory cap as a mixed-integer program.

The zero-bubble paper states its scheduling problem as an ILP (Qi et al. 2024, appendix; the
authors solve it with PuLP). This is that model for minipipe's IR and any placement, solved by HiGHS
through SciPy (`scipy.optimize.milp`; the `search` extra):

    S_a ≥ 0           the start of each action a (every F, I and W of every stage and micro-batch)
    S_b ≥ S_a + d_a + c   for each dependency a → b: F(s−1, j) → F(s, j), I(s+1, j) → I(s, j) (c: the
                      message across the boundary, where the two stages live on different ranks),
                      F(s, j) → I(s, j) → W(s, j), and each stage's F's, I's and W's in micro-batch order
    y_ab ∈ {0, 1}     for two actions of one rank that no dependency orders: a runs before b (y = 1)
                      or after; S_b ≥ S_a + d_a − M(1 − y_ab) and S_a ≥ S_b + d_b − M·y_ab
    memory            at every F's start, what the rank holds — the F's begun, less the W's ended,
                      each a sum of constants and y's — is at most the cap
    C ≥ S_w + d_w     for every W (every action comes before its stage's W); minimise C

A pair that a chain of dependencies already orders (on the V a micro-batch's two chunks on one rank,
say) needs no y: its order and its time are implied. M is the best makespan known (a schedule
already found), and every action ends by then: this bounds the search and keeps M tight.
The order of each rank's list is read off the start times; the replay of that order (the simulator)
is never longer than the MILP's C, and its memory is that of the order, so the schedule returned is
the optimum's. Fast for small sizes only: `small_enough` says which (measured in benchmarks/search_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action
from .zb_greedy import Problem

MAX_BINARIES = 150  # above this the MILP can take more than seconds here (benchmarks/search_speed.py)
OPS3 = (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)


@dataclass(frozen=True)
class Solved:
    lists: list | None  # each rank's actions, ordered; None where nothing under `upper` exists
    makespan: float  # the MILP's C (math.inf where infeasible)
    bound: float  # a proven lower bound on the optimum of this placement
    optimal: bool  # the solver proved it (within its tolerance)
    binaries: int
    seconds: float


def available() -> bool:
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        return False
    return True


class _Model:
    """The actions as numbered nodes, their dependencies, and which same-rank pairs are free."""

    def __init__(self, pr: Problem):
        self.pr = pr
        m, n = pr.m, pr.n_stages
        self.nodes = [(op, s, j) for s in range(n) for op in OPS3 for j in range(m)]
        self.index = {a: i for i, a in enumerate(self.nodes)}
        self.dur = [pr.cost[op][s] for op, s, _ in self.nodes]
        self.edges: list[tuple[int, int, float]] = []  # (a, b, lag): S_b >= S_a + lag
        at = self.index
        for s in range(n):
            for j in range(m):
                f, i, w = at[FORWARD, s, j], at[BACKWARD_INPUT, s, j], at[BACKWARD_WEIGHT, s, j]
                self.edges += [(f, i, self.dur[f]), (i, w, self.dur[i])]
                if s > 0:
                    up = at[FORWARD, s - 1, j]
                    self.edges.append((up, f, self.dur[up] + pr.message(s - 1)))
                if s < n - 1:
                    down = at[BACKWARD_INPUT, s + 1, j]
                    self.edges.append((down, i, self.dur[down] + pr.message(s)))
                if j > 0:
                    for op in OPS3:
                        a = at[op, s, j - 1]
                        self.edges.append((a, at[op, s, j], self.dur[a]))
        self.after, self.head, self.tail = self._reach()
        self.rank_nodes = [[k for k, (_, s, _) in enumerate(self.nodes) if pr.placement[s] == r] for r in range(pr.p)]
        self.free_pairs = [
            (a, b)
            for nodes in self.rank_nodes
            for x, a in enumerate(nodes)
            for b in nodes[x + 1 :]
            if not (self.after[a] >> b) & 1 and not (self.after[b] >> a) & 1
        ]

    def _reach(self) -> tuple[list[int], list[float], list[float]]:
        """after[a]: the bitset of nodes that a chain of dependencies puts after a; head[a], the
        earliest a can start, and tail[a], the least time from a's start to the end of the step."""
        succ: list[list[int]] = [[] for _ in self.nodes]
        indeg = [0] * len(self.nodes)
        for a, b, _ in self.edges:
            succ[a].append(b)
            indeg[b] += 1
        order, queue = [], [k for k, d in enumerate(indeg) if d == 0]
        while queue:
            a = queue.pop()
            order.append(a)
            for b in succ[a]:
                indeg[b] -= 1
                if indeg[b] == 0:
                    queue.append(b)
        lag = {(a, b): x for a, b, x in self.edges}
        head = [0.0] * len(self.nodes)
        for a in order:
            for b in succ[a]:
                head[b] = max(head[b], head[a] + lag[a, b])
        after = [0] * len(self.nodes)
        tail = list(self.dur)
        for a in reversed(order):
            for b in succ[a]:
                after[a] |= after[b] | (1 << b)
                tail[a] = max(tail[a], lag[a, b] + tail[b])
        return after, head, tail

    def before(self, a: int, b: int):
        """Whether a runs before b on their rank: True, False, or None where a y decides."""
        if (self.after[a] >> b) & 1:
            return True
        if (self.after[b] >> a) & 1:
            return False
        return None


def binaries(pr: Problem) -> int:
    return len(_Model(pr).free_pairs)


def small_enough(pr: Problem) -> bool:
    """Whether the MILP is small enough to finish in seconds (at most MAX_BINARIES free pairs)."""
    if 3 * pr.m * pr.n_stages > 600:  # the model itself is not worth building
        return False
    return binaries(pr) <= MAX_BINARIES


def solve(pr: Problem, cap, upper: float, time_limit: float = 10.0) -> Solved:
    """The shortest schedule of `pr` under `cap` per rank (one number, or one per rank), no longer
    than `upper` (a makespan already found: the big M, and a bound on every action's end).
    ImportError naming the extra without SciPy."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError as e:
        raise ImportError(
            "the exact search needs SciPy (HiGHS): pip install 'minipipe[search]' (SciPy, ~40 MB), "
            "or call search(..., exact=False) for the heuristic alone"
        ) from e
    import time

    started = time.perf_counter()
    caps = [float(cap)] * pr.p if isinstance(cap, (int, float)) else [float(c) for c in cap]
    model = _Model(pr)
    n, pairs = len(model.nodes), model.free_pairs
    y_of = {pair: n + 1 + k for k, pair in enumerate(pairs)}
    nvar, big = n + 1 + len(pairs), upper * (1 + 1e-9) + 1e-9
    rows, cols, vals, lo, hi = [], [], [], [], []

    def row(coefs: dict, low: float, high: float):
        r = len(lo)
        for c, x in coefs.items():
            rows.append(r)
            cols.append(c)
            vals.append(x)
        lo.append(low)
        hi.append(high)

    for a, b, lag in model.edges:
        row({b: 1.0, a: -1.0}, lag, np.inf)
    for (a, b), y in y_of.items():
        row({b: 1.0, a: -1.0, y: -big}, model.dur[a] - big, np.inf)  # y = 1: a before b
        row({a: 1.0, b: -1.0, y: big}, model.dur[b], np.inf)  # y = 0: b before a
    lowest = [0.0] * nvar
    for nodes in model.rank_nodes:  # cuts that tighten the LP: what must still run on the rank
        first = min(model.head[k] for k in nodes)
        for k in nodes:
            later = sum(model.dur[b] for b in nodes if b == k or (model.after[k] >> b) & 1)
            earlier = sum(model.dur[b] for b in nodes if (model.after[b] >> k) & 1)
            row({n: 1.0, k: -1.0}, max(later, model.tail[k]), np.inf)
            lowest[k] = max(model.head[k], first + earlier)
        lowest[n] = max(lowest[n], first + sum(model.dur[k] for k in nodes))
    for cap, nodes in zip(caps, model.rank_nodes):
        forwards = [k for k in nodes if model.nodes[k][0] == FORWARD]
        weights = [k for k in nodes if model.nodes[k][0] == BACKWARD_WEIGHT]
        for a in forwards:
            const, coefs = 0.0, {}
            for sign, group, counted in ((1.0, forwards, True), (-1.0, weights, False)):
                for b in group:
                    h = sign * pr.held[model.nodes[b][1]]
                    if b == a:
                        const += h if counted else 0.0
                        continue
                    order = model.before(b, a)
                    if order is True:
                        const += h
                    elif order is None:
                        y = y_of.get((b, a))
                        if y is not None:
                            coefs[y] = coefs.get(y, 0.0) + h  # y_ba: b first
                        else:
                            const += h
                            y = y_of[(a, b)]
                            coefs[y] = coefs.get(y, 0.0) - h  # 1 − y_ab
            if coefs:
                row(coefs, -np.inf, cap - const + 1e-9)
            elif const > cap + 1e-9:
                return Solved(None, float("inf"), upper, True, len(pairs), time.perf_counter() - started)
    c = np.zeros(nvar)
    c[n] = 1.0
    upper_s = np.array([big - t for t in model.tail] + [big] + [1.0] * len(pairs))
    if any(lo_k > up_k for lo_k, up_k in zip(lowest, upper_s)):
        return Solved(None, float("inf"), upper, True, len(pairs), time.perf_counter() - started)
    integrality = np.array([0] * (n + 1) + [1] * len(pairs))
    matrix = coo_array((vals, (rows, cols)), shape=(len(lo), nvar)).tocsr()
    res = milp(
        c,
        constraints=LinearConstraint(matrix, lo, hi),
        integrality=integrality,
        bounds=Bounds(np.array(lowest), upper_s),
        options={"time_limit": float(time_limit), "disp": False},
    )
    seconds = time.perf_counter() - started
    bound = getattr(res, "mip_dual_bound", None)
    if res.x is None:
        infeasible = res.status == 2
        return Solved(None, float("inf"), upper if infeasible else (bound or 0.0), infeasible, len(pairs), seconds)
    starts = res.x[:n]
    lists = []
    for nodes in model.rank_nodes:
        order = sorted(nodes, key=lambda k: (round(starts[k], 6), model.dur[k] > 0, model.nodes[k][2]))
        lists.append([Action(*model.nodes[k]) for k in order])
    optimal = res.status == 0
    return Solved(
        lists,
        float(res.fun),
        float(res.fun) if optimal else float(bound if bound is not None else 0.0),
        optimal,
        len(pairs),
        seconds,
    )
