"""Weight versions: when each stage updates its weights, and which version each micro-batch uses.

A flushed schedule (every kind but the asynchronous ones) is one training step: a stage's weights
are one version throughout, and the engine updates them once, after the step (engine/train.py).
An asynchronous schedule spans several steps with no flush between them, so a stage updates its
weights while other micro-batches are still in flight. Its schedule says how as data, `Updates`:
an update rule and how many micro-batches make one training step (m of the run, the batch the
losses are reported for). From the rule and the lists everything else is derived, as the
communication is (`plan`):

    uses[stage][mb]   the weight version mb's forward runs with on that stage, and so its backward:
                      weight stashing, a backward with the weights its forward used
    into[stage][mb]   the update mb's gradient goes into. Update k makes version k + 1: one optimizer
                      step from version k with the summed gradients of its micro-batches, right after
                      the last of their backwards on the stage (and after update k − 1)
    into − uses       the gradient's staleness: how many updates its weights are behind the weights
                      it is applied to

The rules (the papers' update equations, W the weights, ∇f a gradient, ν the learning rate):

    flush      synchronous: a step's micro-batches use the step's weights, one update per step,
               W(t+1) = W(t) − ν·∇f(W(t)). A flushed kind over several steps (make_schedule(...,
               steps=3)), for the simulator to draw beside the asynchronous ones.
    2bw        PipeDream-2BW (Narayanan et al., ICML 2021, §3.1): one update per step from the step's
               summed gradients; "the weight version a given input microbatch k (1-indexed) uses is
               max(⌊(k−1)/m⌋ − 1, 0)": every stage one step stale, W(t+1) = W(t) − ν·∇f(W(t−1)), and
               at most two versions kept (double buffering).
    pipedream  PipeDream's weight stashing (Narayanan et al., SOSP 2019, §3.3): every stage updates
               after every backward, from that one micro-batch's gradient; a forward takes the newest
               weights and stashes them for its backward. Stage i of n is n − i updates stale:
               w(t+1) = w(t) − ν·∇f(w1(t−n+1), w2(t−n+2), ..., wn(t)).

A version is held from the update that makes it until it is both superseded and no micro-batch
that uses it is still to run its backward (`held`): what a stage's memory keeps besides its
activations, drawn over time by Trace.weight_versions_curve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ir.py imports this module: the type alone, for the checker
    from .ir import Schedule

RULES = ("flush", "2bw", "pipedream")
GRADIENT_DONE = ("B", "W")  # the ops after which a micro-batch's gradient on a stage is whole


@dataclass(frozen=True)
class Updates:
    """How an asynchronous (or a several-step) schedule updates its weights: `rule` (RULES) and
    `per_step`, the micro-batches of one training step (the schedule's m is per_step × steps)."""

    rule: str
    per_step: int

    def steps(self, m: int) -> int:
        return m // self.per_step

    @property
    def per_update(self) -> int:
        """Micro-batches whose gradients one update sums: one for PipeDream, a step's for the others
        (each micro-batch's loss is divided by it, so the sum is the mean's gradient)."""
        return 1 if self.rule == "pipedream" else self.per_step


@dataclass(frozen=True)
class VersionPlan:
    """What `Updates` mean for one schedule, worked out once (Schedule.versions)."""

    uses: tuple[tuple[int, ...], ...]  # [stage][mb]: the version its forward and backward use
    into: tuple[tuple[int, ...], ...]  # [stage][mb]: the update its gradient goes into
    made_after: tuple[tuple[tuple[int, int], ...], ...]  # [stage][k]: (rank, index) after which update k is made
    last_use: tuple[dict[int, tuple[int, int]], ...]  # [stage]: version -> (rank, index) of its last backward

    def staleness(self, stage: int, mb: int) -> int:
        """Updates between the weights mb's gradient was computed with and those it is applied to."""
        return self.into[stage][mb] - self.uses[stage][mb]

    def updates(self, stage: int) -> int:
        return len(self.made_after[stage])


class UpdateProblem(ValueError):
    """An update rule the lists cannot keep; `marked` lists the (rank, index) positions to show."""

    def __init__(self, reason: str, marked: Iterable[tuple[int, int]] = ()) -> None:
        super().__init__(reason)
        self.reason, self.marked = reason, list(marked)


def _into(rule: str, per_step: int, mb: int) -> int:
    return mb if rule == "pipedream" else mb // per_step


def _uses(rule: str, per_step: int, mb: int, newest: int) -> int:
    if rule == "pipedream":
        return newest  # the newest weights at its forward, stashed
    if rule == "2bw":
        return max(mb // per_step - 1, 0)  # the paper's max(⌊(k−1)/m⌋ − 1, 0), k = mb + 1
    return mb // per_step


def plan(s: Schedule) -> VersionPlan:
    """Derive the version plan of schedule `s` (which has `s.updates`); raises UpdateProblem when
    the lists cannot keep the rule: a forward whose version is not made yet when it runs."""
    u = s.updates
    if u is None:
        raise ValueError("a version plan needs a schedule with updates (Schedule.updates); a flushed step has none")
    if u.rule not in RULES:
        raise UpdateProblem(f"unknown update rule {u.rule!r}; the rules are {', '.join(RULES)}")
    if isinstance(u.per_step, bool) or not isinstance(u.per_step, int) or u.per_step < 1 or s.m % u.per_step:
        raise UpdateProblem(
            f"updates per_step={u.per_step!r} must be a whole number >= 1 that divides m={s.m}: the "
            f"schedule holds whole training steps of per_step micro-batches each"
        )
    if s.forward_only:
        raise UpdateProblem("a forward-only schedule has no gradients, so nothing to update; leave updates out")
    n, m = s.n_stages, s.m
    into = [[_into(u.rule, u.per_step, mb) for mb in range(m)] for _ in range(n)]
    uses = [[0] * m for _ in range(n)]
    left: list[dict[int, int]] = [
        {} for _ in range(n)
    ]  # stage -> update -> micro-batches whose gradient is still to come
    for stage in range(n):
        for mb in range(m):
            left[stage][into[stage][mb]] = left[stage].get(into[stage][mb], 0) + 1
    made_after: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    last_use: list[dict[int, tuple[int, int]]] = [{} for _ in range(n)]
    for r, acts in enumerate(s.actions):
        for i, a in enumerate(acts):
            if a.mb is None:  # a stage's own action (FSDP's): no micro-batch, no version
                continue
            k = a.stage
            if a.op == "F":
                newest = len(made_after[k])
                want = uses[k][a.mb] = _uses(u.rule, u.per_step, a.mb, newest)
                if want > newest:
                    wait = len(made_after[k])
                    raise UpdateProblem(
                        f"rank {r} runs {a} with version {want} of stage {k}'s weights, but stage {k} has made only "
                        f"versions 0..{newest} by then: update {wait} waits for the backward of micro-batch "
                        f"{_last_of(into[k], wait)} on stage {k}, later in the lists. Run that backward before {a}, "
                        f"or use a rule that takes older weights",
                        [(r, i)],
                    )
            elif a.op in GRADIENT_DONE:  # a split backward has no B, a whole one no W
                last_use[k][uses[k][a.mb]] = (r, i)
                left[k][into[k][a.mb]] -= 1
                while left[k].get(len(made_after[k])) == 0:  # updates are made in order, each when whole
                    made_after[k].append((r, i))
    return VersionPlan(tuple(map(tuple, uses)), tuple(map(tuple, into)), tuple(map(tuple, made_after)), tuple(last_use))


def _last_of(into_row: Sequence[int], update: int) -> int:
    return max(mb for mb, k in enumerate(into_row) if k == update)


def held(
    s: Schedule, end_of: Callable[[int, int], float], start: float, finish: float
) -> list[list[tuple[float, float]]]:
    """[stage] -> (from, until) of each version k = 0, 1, ...: made (version 0 at `start`; version
    k + 1 when the action after which update k is made ends: `end_of(rank, index)`), held until it
    is superseded and its last backward has ended (the newest until `finish`)."""
    versions = s.versions
    if versions is None:  # a flushed step: its one version, all along
        return [[(start, finish)] for _ in range(s.n_stages)]
    out = []
    for stage in range(s.n_stages):
        born = [start] + [end_of(*where) for where in versions.made_after[stage]]
        spans = []
        for k, t in enumerate(born):
            until = born[k + 1] if k + 1 < len(born) else finish
            if k in versions.last_use[stage]:
                until = max(until, end_of(*versions.last_use[stage][k]))
            spans.append((t, until))
        out.append(spans)
    return out


def to_header(u: Updates) -> str:
    return f"updates={u.rule} per_step={u.per_step}"
