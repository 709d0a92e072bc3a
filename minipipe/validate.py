"""Prove a schedule can run before any process starts.

Two kinds of check:
- structure: every (stage, micro-batch) has exactly one F and one B (and one W when backward
  is split), each on the rank that owns the stage;
- order: replay the per-rank lists, every action waiting for the actions whose data it needs
  (a forward needs the previous stage's forward; a backward needs its own forward and the
  next stage's backward). If the replay gets stuck, the schedule would deadlock on real
  processes; the error walks the cycle of waits and marks it in the grid.

The same replay, given per-action costs, is the simulator (simulate.py).
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from .schedule import Action, Schedule, grid


class ScheduleError(ValueError):
    """A schedule that cannot run. The message holds the reason and the grid, marked."""

    def __init__(self, schedule: Schedule, reason: str, marked=()):
        self.reason = reason
        self.marked = list(marked)
        aligned = not self.marked  # a marked grid shows list positions, so the mark is where the action is
        super().__init__(f"{reason}\n\n{grid(schedule, mark=self.marked, aligned=aligned)}")


def dependencies(a: Action, n_stages: int) -> tuple[Action, ...]:
    """The actions whose results `a` consumes."""
    if a.op == "F":
        return (Action("F", a.stage - 1, a.mb),) if a.stage > 0 else ()
    if a.op == "B":
        own = Action("F", a.stage, a.mb)
        return (own, Action("B", a.stage + 1, a.mb)) if a.stage < n_stages - 1 else (own,)
    return (Action("B", a.stage, a.mb),)  # W


def check_structure(s: Schedule) -> None:
    """Completeness and placement; raises ScheduleError."""
    if len(s.actions) != s.p or len(s.placement) != s.n_stages:
        raise ValueError(
            f"schedule shape is inconsistent: p={s.p}, v={s.v} needs {s.p} action lists and "
            f"{s.n_stages} placement entries, got {len(s.actions)} and {len(s.placement)}"
        )
    if any(not 0 <= r < s.p for r in s.placement):
        raise ValueError(f"placement {s.placement} names a rank outside 0..{s.p - 1}")
    seen: dict[Action, tuple[int, int]] = {}
    for r, acts in enumerate(s.actions):
        for i, a in enumerate(acts):
            if a.op not in ("F", "B", "W") or not 0 <= a.stage < s.n_stages or not 0 <= a.mb < s.m:
                raise ScheduleError(
                    s, f"rank {r} runs {a}, which is outside the schedule: ops are F, B, W, stages "
                    f"0..{s.n_stages - 1}, micro-batches 0..{s.m - 1}", [(r, i)])
            owner = s.placement[a.stage]
            if owner != r:
                raise ScheduleError(
                    s, f"rank {r} runs {a}, but stage {a.stage} lives on rank {owner}; "
                    f"move {a} to rank {owner}'s list", [(r, i)])
            if a in seen:
                raise ScheduleError(
                    s, f"{a} appears twice (rank {r}); each action runs exactly once, remove one",
                    [seen[a], (r, i)])
            seen[a] = (r, i)
    ops = ("F", "B", "W") if s.split_backward else ("F", "B")
    for stage in range(s.n_stages):
        for mb in range(s.m):
            for op in ops:
                a = Action(op, stage, mb)
                if a not in seen:
                    what = {"F": "forward", "B": "backward", "W": "weight gradient"}[op]
                    raise ScheduleError(
                        s, f"{a} is missing: rank {s.placement[stage]} never runs the {what} of "
                        f"micro-batch {mb} on stage {stage}; add it to rank {s.placement[stage]}'s list")


def replay(
    s: Schedule,
    duration: Callable[[int, Action], float] | None = None,
    transfer: Callable[[Action, int, int], float] | None = None,
) -> list[list[tuple[float, float]]]:
    """Run the lists in dependency order. Returns (start, end) of every action, per rank.

    `duration(rank, action)` is the action's compute time (1 when not given);
    `transfer(dep, src, dst)` the time to move `dep`'s result between ranks (0 when not given).
    Sends never block (the executor posts them non-blocking), so the only way to get stuck is
    a cycle of ranks each waiting for data another produces later: a deadlock.
    """
    n_stages, owner = s.n_stages, s.placement
    pos = [0] * s.p
    free = [0.0] * s.p
    end: dict[Action, float] = {}
    times: list[list[tuple[float, float]]] = [[] for _ in range(s.p)]
    waiting: dict[Action, list[int]] = {}
    blocked_on: dict[int, Action] = {}
    ready = deque(range(s.p))
    while ready:
        r = ready.popleft()
        acts = s.actions[r]
        while pos[r] < len(acts):
            a = acts[pos[r]]
            start = free[r]
            blocked = None
            for d in dependencies(a, n_stages):
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
            finish = start + (1.0 if duration is None else duration(r, a))
            end[a] = free[r] = finish
            times[r].append((start, finish))
            pos[r] += 1
            ready.extend(waiting.pop(a, ()))
    if any(pos[r] < len(s.actions[r]) for r in range(s.p)):
        _explain_deadlock(s, pos, blocked_on)
    return times


def _explain_deadlock(s: Schedule, pos: list[int], blocked_on: dict[int, Action]):
    stuck = [r for r in range(s.p) if pos[r] < len(s.actions[r])]
    for r in stuck:   # a rank waiting for its own later action: a plain ordering mistake
        a, d = s.actions[r][pos[r]], blocked_on[r]
        if s.placement[d.stage] == r:
            raise ScheduleError(
                s, f"rank {r} runs {a} before {d}, which {a} needs; move {d} before {a} in rank {r}'s list",
                [(r, pos[r]), _index(s, d)])
    chain, parts, rank = [], [], stuck[0]
    while rank not in chain:  # follow who-waits-for-whom until a rank repeats: the cycle
        chain.append(rank)
        a, d = s.actions[rank][pos[rank]], blocked_on[rank]
        q = s.placement[d.stage]
        parts.append(f"rank {rank} waits for {d} (to run {a}), which rank {q} only runs after {s.actions[q][pos[q]]}")
        rank = q
    cycle = chain[chain.index(rank):]
    parts = parts[chain.index(rank):]
    reason = "deadlock: " + "; ".join(parts) + " — a cycle of waits, so no rank can move. " \
        "Reorder the lists so that every action comes after the actions it needs data from."
    raise ScheduleError(s, reason, [(q, pos[q]) for q in cycle])


def _index(s: Schedule, a: Action) -> tuple[int, int]:
    r = s.placement[a.stage]
    return r, s.actions[r].index(a)


def validate(s: Schedule) -> Schedule:
    """Raise ScheduleError (a ValueError) if `s` cannot run; return it unchanged if it can."""
    check_structure(s)
    replay(s)
    return s


def unit_steps(s: Schedule) -> list[list[int]]:
    """The start step of every action when each takes one step: the layout of the grid."""
    return [[int(start) for start, _ in row] for row in replay(s)]


def transfers(s: Schedule) -> list[tuple[Action, int, int]]:
    """Every message the schedule implies: (producer, src rank, dst rank), in consumer order.
    A forward's output goes to the next stage's forward; a backward's input gradient goes to
    the previous stage's backward. Same-rank neighbours need no message."""
    out = []
    for r, acts in enumerate(s.actions):
        for a in acts:
            for d in dependencies(a, s.n_stages):
                if s.placement[d.stage] != r:
                    out.append((d, s.placement[d.stage], r))
    return out


def boundary(producer: Action) -> int:
    """Which stage boundary a message crosses: the output of stage k is boundary k. A forward of
    stage s sends boundary s; a backward of stage s sends the gradient of boundary s - 1."""
    return producer.stage if producer.op == "F" else producer.stage - 1
