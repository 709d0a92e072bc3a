"""Schedules found by search: the shortest step a memory cap allows, for given costs.

    from minipipe import Costs
    from minipipe.schedule.search import search

    found = search(p=4, m=8, costs=Costs(forward=1, backward=2, weight=1), cap=5)
    found.schedule            # an ordinary Schedule: validate, simulate, draw, run, export it
    found.makespan, found.peak, found.how
    print(found.table())      # every candidate beside it: the hand-written kinds, the heuristic, the optimum

The cap is per rank (one number for every rank, or one per rank), in micro-batches' activations
(a rank's whole share of one micro-batch is 1; a chunk of v per rank is 1/v), or in bytes with
`unit_bytes` (what one micro-batch's activations of a rank's share weigh). What it tries, in three
placements of the stages (one per rank; the V of
ZB-V; round robin with two chunks):

    the hand-written kinds   1F1B, interleaved, ZB-H1, ZB-V, DualPipe-V, those that fit the cap
    the heuristic            the zero-bubble paper's greedy (zb_greedy.py), over its policies
    the exact search         a MILP (milp.py, HiGHS through SciPy) where the problem is small:
                             the optimum, or with a time limit the best found and a proven bound

and returns the shortest that fits (`Found`), saying which it was. Every backward the search writes
is split into I and W: in this cost model B = I + W, so a split backward is never slower and its W
can wait. The heuristic and the optimum run each stage's F's, I's and W's in micro-batch order (as
the paper's ILP does: micro-batches are interchangeable).

Nothing here imports torch; `costs` is read as `sim.costs.Costs` gives it (`table`, `latency`,
`bandwidth`, `activation_bytes`, `pair`), so this module needs nothing from above the IR.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import kinds, vshape
from .ir import Schedule, round_robin
from .ops import ALL_OPS, COMPUTE
from .replay import Stuck as Deadlock
from .replay import replay
from .validate import validate
from .zb_greedy import Problem, Stuck, candidates, greedy

PLACEMENTS = ("line", "v", "interleaved")
HAND_WRITTEN = ("1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe-v")
PLACED = {"1f1b": "line", "zb-h1": "line", "interleaved": "interleaved", "zb-v": "v", "dualpipe-v": "v"}
SEARCHED = "searched"  # the kind name of a schedule the search wrote


@dataclass(frozen=True)
class Tried:
    """One candidate: its name, makespan, peak (the highest rank's, in the cap's unit), whether it fits."""

    name: str
    makespan: float
    peak: float
    fits: bool
    schedule: Schedule | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Found:
    schedule: Schedule
    makespan: float
    peak: tuple[float, ...]  # per rank, in the cap's unit
    how: str  # which candidate it is: "heuristic (line)", "optimum (v)", "zb-v", ...
    cap: tuple[float, ...]  # per rank
    heuristic: float  # the heuristic's best makespan under the cap (math.inf if none)
    optimum: float | None  # the proven optimum of the search space, where the exact search finished
    bound: float | None  # a proven lower bound on it (the optimum where it finished)
    seconds: float
    tried: tuple[Tried, ...]

    @property
    def gap(self) -> float | None:
        """How far the heuristic is above the optimum (or above the proven bound), as a fraction."""
        best = self.optimum if self.optimum is not None else self.bound
        if best is None or not math.isfinite(self.heuristic) or best <= 0:
            return None
        return self.heuristic / best - 1

    def table(self) -> str:
        cap = f"{self.cap[0]:g}" if len(set(self.cap)) == 1 else ",".join(f"{c:g}" for c in self.cap)
        lines = [
            f"p={self.schedule.p} m={self.schedule.m} cap={cap} per rank: the best is {self.how}, "
            f"makespan {self.makespan:g}, peak {max(self.peak):g} ({self.seconds:.2f} s)",
            f"{'candidate':<24} {'makespan':>9} {'peak':>6}  fits",
        ]
        for t in sorted(self.tried, key=lambda t: (not t.fits, t.makespan)):
            lines.append(f"{t.name:<24} {t.makespan:>9.4g} {t.peak:>6.3g}  {'yes' if t.fits else 'no'}")
        if self.optimum is not None:
            lines.append(f"optimum (MILP) {self.optimum:g}: the heuristic is {100 * self.gap:.1f} % above it")
        elif self.bound is not None:
            lines.append(f"the MILP stopped at its time limit; the optimum is at least {self.bound:g}")
        return "\n".join(lines)


# -- the terms of a search ------------------------------------------------------------------------
def placement_of(name: str, p: int) -> tuple[int, tuple[int, ...]]:
    """(v, the rank of each stage) of a placement the search knows."""
    if name == "line":
        return 1, round_robin(p, 1)
    if name == "v":
        return 2, vshape.v_placement(p)
    if name == "interleaved":
        return 2, round_robin(p, 2)
    raise ValueError(f"unknown placement {name!r}; the search knows {', '.join(PLACEMENTS)}")


def problem(p: int, m: int, costs, placement: str = "line", unit_bytes: float | None = None) -> Problem:
    """The fixed terms of a search on one placement: op times per stage, message times per boundary,
    and what a micro-batch holds on each stage (1/v of `unit_bytes`, or of one micro-batch)."""
    v, where = placement_of(placement, p)
    n = p * v
    table = costs.table(n, v)
    sizes = costs.activation_bytes
    sizes = [float(sizes)] * n if isinstance(sizes, (int, float)) else [float(x) for x in sizes]
    if len(sizes) != n:
        raise ValueError(
            f"activation_bytes gives {len(sizes)} stages, but the {placement} placement has {n}; "
            f"give one number (a rank's share, the same across placements)"
        )
    comm = tuple(costs.latency + (sizes[k] / costs.bandwidth if sizes[k] else 0.0) for k in range(n))
    unit = 1.0 if unit_bytes is None else float(unit_bytes)
    return Problem(
        p, m, v, where, {op: list(table[op]) for op in ("F", "B", "I", "W")}, comm, tuple(unit / v for _ in range(n))
    )


def measure(schedule: Schedule, pr: Problem, costs=None) -> tuple[float, tuple[float, ...]]:
    """Makespan (the replay on the costs, as the simulator does it) and each rank's peak of what
    it holds (in the cap's unit), counted along the rank's list: a micro-batch's activations on a
    stage are held from its F until its B or W."""
    cost = pr.cost
    pair = costs.pair({op: cost.get(op, [0.0] * pr.n_stages) for op in ALL_OPS}) if costs is not None else None

    def transfer(d, src, dst):
        return pr.comm[d.stage if d.op == "F" else d.stage - 1]

    times = replay(
        schedule,
        lambda r, a: cost[a.op][a.stage] if a.op in COMPUTE else 0.0,
        transfer if any(pr.comm) else None,
        pair=pair,
    )
    span = max(e for row in times for _, e in row) - min(s for row in times for s, _ in row)
    peaks = []
    for acts in schedule.actions:
        held = peak = 0.0
        for a in acts:
            op = ALL_OPS[a.op]
            if op.holds:
                held += pr.held[a.stage]
                peak = max(peak, held)
            elif op.frees:
                held -= pr.held[a.stage]
        peaks.append(peak)
    return span, tuple(peaks)


def least_cap(p: int, m: int, costs, unit_bytes: float | None = None) -> float:
    """The least cap any valid schedule needs: one micro-batch's activations on a rank (all its
    chunks there are held at once before its first backward on the rank)."""
    return min(problem(p, m, costs, name, unit_bytes).least_cap() for name in PLACEMENTS)


def _check(p, m, cap, costs, unit_bytes) -> tuple[float, ...]:
    """The cap as one number per rank, checked."""
    for name, value in (("p (ranks)", p), ("m (micro-batches)", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    caps = (
        (math.inf,) * p
        if cap is None
        else (float(cap),) * p
        if isinstance(cap, (int, float))
        else tuple(math.inf if c is None else float(c) for c in cap)
    )
    if len(caps) != p:
        raise ValueError(f"cap gives {len(caps)} numbers for p={p} ranks; give one number, or one per rank")
    least = least_cap(p, m, costs, unit_bytes)
    unit = "bytes" if unit_bytes is not None else "micro-batches' activations"
    for r, c in enumerate(caps):
        if not c >= least - 1e-9:
            raise ValueError(
                f"cap={c:g} {unit} on rank {r} is below what any valid schedule needs: every micro-batch "
                f"holds its activations on a rank from its forward to its backward, so the least cap is "
                f"{least:g} (one micro-batch's); raise the cap to at least {least:g}"
            )
    return caps


def fits(peaks: Sequence[float], caps: Sequence[float]) -> bool:
    return all(x <= c + 1e-9 for x, c in zip(peaks, caps))


# -- the candidates -------------------------------------------------------------------------------
def hand_written(
    p: int,
    m: int,
    costs,
    caps: Sequence[float] | None = None,
    unit_bytes: float | None = None,
    placements: Sequence[str] = PLACEMENTS,
) -> list[Tried]:
    """The hand-written kinds on these placements that take (p, m), each timed and sized on `costs`."""
    out = []
    for name in HAND_WRITTEN:
        k = kinds.get(name)
        if PLACED[name] not in placements or kinds.unsuited(k, p, m, k.default_v):
            continue
        s = kinds.make_schedule(name, p, m, k.default_v)
        span, peaks = measure(s, problem(p, m, costs, PLACED[name], unit_bytes), costs)
        out.append(Tried(name, span, max(peaks), caps is None or fits(peaks, caps), s))
    return out


def heuristic(
    p: int,
    m: int,
    costs,
    caps: Sequence[float] | None = None,
    unit_bytes: float | None = None,
    placements: Sequence[str] = PLACEMENTS,
) -> list[Tried]:
    """The greedy's best schedule on each placement under the cap (its policies tried in turn)."""
    caps = tuple(caps) if caps is not None else (math.inf,) * p
    out = []
    for name in placements:
        pr = problem(p, m, costs, name, unit_bytes)
        if p == 1 and name != "line" or pr.least_cap() > min(caps) + 1e-9:
            continue
        best, seen = None, set()
        for policy in candidates(pr, caps):
            try:
                lists = greedy(pr, policy)
            except Stuck:
                continue
            key = tuple(map(tuple, lists))
            if key in seen:  # policies often agree: replay each schedule once
                continue
            seen.add(key)
            s = Schedule.build(SEARCHED, pr.p, pr.m, pr.v, lists, pr.placement)
            try:
                span, peaks = measure(s, pr)  # the replay is the validator's: it finds a deadlock
            except Deadlock:
                continue
            if fits(peaks, caps) and (best is None or span < best[0] - 1e-9):
                best = (span, max(peaks), s)  # (makespan, peak, schedule) of the fastest that fits
        if best is not None:
            makespan, peak, fastest = best
            out.append(Tried(f"heuristic ({name})", makespan, peak, True, validate(fastest)))
    return out


def _as_schedule(lists, pr: Problem) -> Schedule:
    return validate(Schedule.build(SEARCHED, pr.p, pr.m, pr.v, lists, pr.placement))


def search(
    p: int,
    m: int,
    costs,
    cap: float | None = None,
    *,
    unit_bytes: float | None = None,
    exact: bool | str = "auto",
    time_limit: float = 10.0,
    placements: Sequence[str] = PLACEMENTS,
) -> Found:
    """The shortest schedule found for p ranks and m micro-batches under `cap` per rank (one number,
    one per rank, or None: no cap), on `costs` (sim.costs.Costs).

    exact: "auto" runs the MILP where it is small enough to finish in seconds (milp.small_enough)
    and SciPy is installed; True runs it always (ImportError naming the extra if SciPy is missing);
    False never. `time_limit` (seconds) bounds each MILP; one stopped early still gives a bound.
    Raises ValueError when the cap is below the least any valid schedule needs, naming that least."""
    started = time.perf_counter()
    caps = _check(p, m, cap, costs, unit_bytes)
    tried = hand_written(p, m, costs, caps, unit_bytes, placements) + heuristic(
        p, m, costs, caps, unit_bytes, placements
    )
    found = [t for t in tried if t.fits]
    if not found:  # the greedy fits any cap from the least up on every placement, so this is a bug
        raise RuntimeError(f"the search found no schedule under cap={caps} for p={p}, m={m} on {placements}")
    heur = min((t.makespan for t in tried if t.name.startswith("heuristic")), default=math.inf)
    optimum = bound = None
    if exact:
        from . import milp

        best_so_far = min(t.makespan for t in found)
        problems = [(name, problem(p, m, costs, name, unit_bytes)) for name in placements]
        problems = [
            (name, pr) for name, pr in problems if not (p == 1 and name != "line" or pr.least_cap() > min(caps) + 1e-9)
        ]
        small = exact != "auto" or milp.available() and all(milp.small_enough(pr) for _, pr in problems)
        results = (
            [(name, pr, milp.solve(pr, caps, upper=best_so_far, time_limit=time_limit)) for name, pr in problems]
            if small
            else []
        )
        if results:
            for name, pr, r in results:
                if r.lists is not None:
                    s = _as_schedule(r.lists, pr)
                    span, peaks = measure(s, pr)
                    found.append(
                        Tried(
                            f"optimum ({name})" if r.optimal else f"MILP ({name})",
                            span,
                            max(peaks),
                            fits(peaks, caps),
                            s,
                        )
                    )
                    tried.append(found[-1])
            bound = min(r.bound for _, _, r in results)
            if all(r.optimal for _, _, r in results):  # the optimum, as the simulator times its schedule
                optimum = bound = min(t.makespan for t in found if t.fits)
    fitting = [t for t in found if t.fits]  # the hand-written kinds first: a tie goes to the known one
    best = min(fitting, key=lambda t: (round(t.makespan, 9), fitting.index(t)))
    v = best.schedule.v
    where = "line" if v == 1 else "v" if best.schedule.placement == vshape.v_placement(p) else "interleaved"
    _, peaks = measure(best.schedule, problem(p, m, costs, where, unit_bytes), costs)
    return Found(
        best.schedule,
        best.makespan,
        peaks,
        best.name,
        caps,
        heur,
        optimum,
        bound,
        time.perf_counter() - started,
        tuple(tried),
    )
