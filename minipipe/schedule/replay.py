"""Run a schedule's per-rank lists in dependency order, on paper.

Every action waits for its rank to be free and for the actions whose data it needs (ops.py says
which). Given per-action costs this is the simulator; with unit costs it lays out the text grid
and proves the schedule finishes. Sends never block (the executor posts them non-blocking), so
the only way to get stuck is a cycle of ranks each waiting for data another produces later.

An overlapped pair (Schedule.paired: a forward and a backward run as one) starts when both have
their inputs and ends as one: both results leave at its end, as they would from two streams of
a GPU. It takes `pair(rank, f, b)` (default: the two durations added), shown as the forward
then the backward, each its share of the pair's time.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .ops import Action

if TYPE_CHECKING:  # ir.py imports this module: the type only, for the checker
    from .ir import Schedule

Duration = Callable[[int, Action], float]
Pair = Callable[[int, Action, Action], float]


class Stuck(Exception):
    """The replay could not finish: `pos[r]` is the index of the action rank r is stuck at and
    `blocked_on[r]` the action it waits for. deadlock.py turns this into a readable error."""

    def __init__(self, pos: list[int], blocked_on: dict[int, Action]):
        super().__init__("the schedule cannot finish")
        self.pos, self.blocked_on = pos, blocked_on


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold Python's cycle collector while a replay runs. A replay makes a few small tuples per
    action, none of them in a cycle, and each batch of new objects would otherwise trigger
    collections that walk the whole heap: a quarter of the simulator's time at p=64, m=512."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def replay(
    s: Schedule,
    duration: Duration | None = None,
    transfer: Callable[[Action, int, int], float] | None = None,
    release: Callable[[Action], float] | None = None,
    pair: Pair | None = None,
) -> list[list[tuple[float, float]]]:
    """(start, end) of every action of schedule `s`, per rank, in list order.

    `duration(rank, action)` is the action's compute time (1 when not given);
    `transfer(dep, src, dst)` the time to move `dep`'s result between ranks (0 when not given);
    `release(action)` the earliest time it may start (serving: a micro-batch's requests arrive);
    `pair(rank, forward, backward)` the time of an overlapped pair (default: both durations).
    Raises Stuck when the lists cannot all run to their end.
    """
    with collector_paused():
        return _replay(s, duration, transfer, release, pair)


def _replay(
    s: Schedule,
    duration: Duration | None,
    transfer: Callable[[Action, int, int], float] | None,
    release: Callable[[Action], float] | None,
    pair: Pair | None,
) -> list[list[tuple[float, float]]]:
    owner = s.placement
    needs = s.needs_by_rank  # what each action consumes, worked out once per schedule
    pos = [0] * s.p
    free = [0.0] * s.p
    end: dict[Action, float] = {}
    times: list[list[tuple[float, float]]] = [[] for _ in range(s.p)]
    waiting: dict[Action, list[int]] = {}
    blocked_on: dict[int, Action] = {}
    ready = deque(range(s.p))
    pairs = s.pair_starts
    cost: Duration = (lambda r, a: 1.0) if duration is None else duration
    while ready:
        r = ready.popleft()
        acts, wants, row, i = s.actions[r], needs[r], times[r], pos[r]
        while i < len(acts):
            n = 2 if pairs and (r, i) in pairs else 1  # an overlapped pair runs as one
            start = free[r] if release is None else max(free[r], *map(release, acts[i : i + n]))
            blocked = None
            for d in wants[i] if n == 1 else wants[i] + wants[i + 1]:
                t = end.get(d)
                if t is None:
                    blocked = d
                    break
                if transfer is not None and owner[d.stage] != r:
                    t += transfer(d, owner[d.stage], r)
                if t > start:
                    start = t
            if blocked is not None:
                waiting.setdefault(blocked, []).append(r)
                blocked_on[r] = blocked
                break
            if n == 1:
                a = acts[i]
                finish = start + cost(r, a)
                row.append((start, finish))
                end[a] = finish
                if a in waiting:
                    ready.extend(waiting.pop(a))
            else:
                finish = _run_pair(r, acts[i : i + 2], start, row, cost, pair)
                for a in acts[i : i + 2]:
                    end[a] = finish
                    ready.extend(waiting.pop(a, ()))
            i += n
            free[r] = finish
        pos[r] = i
    if any(pos[r] < len(s.actions[r]) for r in range(s.p)):
        raise Stuck(pos, blocked_on)
    return times


def _run_pair(
    r: int, together: Sequence[Action], start: float, row: list[tuple[float, float]], cost: Duration, pair: Pair | None
) -> float:
    """An overlapped pair from `start`: shown as its forward then its backward, each its share
    of the pair's time; returns when both end."""
    each = [cost(r, a) for a in together]
    total = sum(each) if pair is None else pair(r, together[0], together[1])
    t = start
    for share in each:
        part = total * share / sum(each) if sum(each) else total / len(together)
        row.append((t, t + part))
        t += part
    return start + total


def unit_steps(s: Schedule) -> list[list[int]]:
    """The start step of every action when each takes one step: the layout of the grid."""
    return [[int(start) for start, _ in row] for row in replay(s)]
