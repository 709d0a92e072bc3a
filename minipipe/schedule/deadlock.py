"""A schedule's replay with a deadlock explained: where the replay (replay.py) gets stuck, the
schedule would deadlock on real processes, and the ScheduleError says why in the schedule's own
actions. A rank that waits for its own later action is an ordering mistake, named as one; else the
waits are followed from rank to rank until one repeats, and that cycle is walked in words and
marked in the grid.

The validator (validate.py), the simulator (sim/pipeline.py, sim/mesh_step.py) and the engine's
message order (engine/comm.py) replay through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from .errors import ScheduleError, index_of
from .ir import Schedule
from .ops import Action
from .replay import Stuck, replay


def validated_replay(
    s: Schedule,
    duration: Callable[[int, Action], float] | None = None,
    transfer: Callable[[Action, int, int], float] | None = None,
    pair: Callable[[int, Action, Action], float] | None = None,
) -> list[list[tuple[float, float]]]:
    """replay.replay, with a deadlock explained as a ScheduleError (the cycle of waits, marked)."""
    try:
        return replay(s, duration, transfer, pair=pair)
    except Stuck as stuck:
        explain_deadlock(s, stuck.pos, stuck.blocked_on)


def explain_deadlock(s: Schedule, pos: list[int], blocked_on: dict[int, Action]) -> NoReturn:
    stuck = [r for r in range(s.p) if pos[r] < len(s.actions[r])]
    for r in stuck:  # a rank waiting for its own later action: a plain ordering mistake
        a, d = s.actions[r][pos[r]], blocked_on[r]
        if s.placement[d.stage] == r:
            raise ScheduleError(
                s,
                f"rank {r} runs {a} before {d}, which {a} needs; move {d} before {a} in rank {r}'s list",
                [(r, pos[r]), index_of(s, d)],
            )
    chain, parts, rank = [], [], stuck[0]
    while rank not in chain:  # follow who-waits-for-whom until a rank repeats: the cycle
        chain.append(rank)
        a, d = s.actions[rank][pos[rank]], blocked_on[rank]
        q = s.placement[d.stage]
        parts.append(f"rank {rank} waits for {d} (to run {a}), which rank {q} only runs after {s.actions[q][pos[q]]}")
        rank = q
    cycle = chain[chain.index(rank) :]
    parts = parts[chain.index(rank) :]
    reason = (
        "deadlock: " + "; ".join(parts) + " — a cycle of waits, so no rank can move. "
        "Reorder the lists so that every action comes after the actions it needs data from."
    )
    raise ScheduleError(s, reason, [(q, pos[q]) for q in cycle])
