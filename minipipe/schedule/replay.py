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

from collections import deque
from typing import Callable

from .ops import Action


class Stuck(Exception):
    """The replay could not finish: `pos[r]` is the index of the action rank r is stuck at and
    `blocked_on[r]` the action it waits for. validate.py turns this into a readable error."""

    def __init__(self, pos: list[int], blocked_on: dict[int, Action]):
        super().__init__("the schedule cannot finish")
        self.pos, self.blocked_on = pos, blocked_on


def replay(s, duration: Callable[[int, Action], float] | None = None,
           transfer: Callable[[Action, int, int], float] | None = None,
           release: Callable[[Action], float] | None = None,
           pair: Callable[[int, Action, Action], float] | None = None) -> list[list[tuple[float, float]]]:
    """(start, end) of every action of schedule `s`, per rank, in list order.

    `duration(rank, action)` is the action's compute time (1 when not given);
    `transfer(dep, src, dst)` the time to move `dep`'s result between ranks (0 when not given);
    `release(action)` the earliest time it may start (serving: a micro-batch's requests arrive);
    `pair(rank, forward, backward)` the time of an overlapped pair (default: both durations).
    Raises Stuck when the lists cannot all run to their end.
    """
    owner = s.placement
    pos = [0] * s.p
    free = [0.0] * s.p
    end: dict[Action, float] = {}
    times: list[list[tuple[float, float]]] = [[] for _ in range(s.p)]
    waiting: dict[Action, list[int]] = {}
    blocked_on: dict[int, Action] = {}
    ready = deque(range(s.p))
    pairs = getattr(s, "pair_starts", ())
    cost = (lambda r, a: 1.0) if duration is None else duration
    while ready:
        r = ready.popleft()
        acts = s.actions[r]
        while pos[r] < len(acts):
            i = pos[r]
            together = acts[i:i + 2] if (r, i) in pairs else acts[i:i + 1]
            start = free[r] if release is None else max(free[r], *map(release, together))
            blocked = None
            needs = s.needs(together[0]) if len(together) == 1 else [d for a in together for d in s.needs(a)]
            for d in needs:
                t = end.get(d)
                if t is None:
                    blocked = d
                    break
                src = owner[d.stage]
                if src != r and transfer is not None:
                    t += transfer(d, src, r)
                if t > start:
                    start = t
            if blocked is not None:
                waiting.setdefault(blocked, []).append(r)
                blocked_on[r] = blocked
                break
            if len(together) == 1:
                finish = start + cost(r, together[0])
                times[r].append((start, finish))
            else:                       # a pair: shown as its two ops, each its share of the pair's time
                each = [cost(r, a) for a in together]
                total = sum(each) if pair is None else pair(r, *together)
                t = start
                for share in each:
                    part = total * share / sum(each) if sum(each) else total / len(together)
                    times[r].append((t, t + part))
                    t += part
                finish = start + total
            for a in together:
                end[a] = finish
                pos[r] += 1
                ready.extend(waiting.pop(a, ()))
            free[r] = finish
    if any(pos[r] < len(s.actions[r]) for r in range(s.p)):
        raise Stuck(pos, blocked_on)
    return times


def unit_steps(s) -> list[list[int]]:
    """The start step of every action when each takes one step: the layout of the grid."""
    return [[int(start) for start, _ in row] for row in replay(s)]
