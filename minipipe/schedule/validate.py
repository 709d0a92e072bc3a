"""Prove a schedule can run before any process starts.

Two kinds of check:
- structure: every (stage, micro-batch) has exactly one F and one backward — a B, or an I and a
  W (ops.BACKWARD_FORMS) — each on the rank that owns the stage. Where a schedule writes its
  sends and receives, each message the computations imply has its send after its producer and
  its receive before its consumer, and nothing else is sent; where it writes FSDP's actions, each
  stage computes only between an UNSHARD and the RESHARD after it (and computes in every such
  window, as torch's runtime needs), and reduces its gradients once, after its last B or W;
- order: replay the per-rank lists, every action waiting for the actions whose data it needs
  (replay.py; an explicit send leaves when it is written, a receive is posted and waited for at
  the computation that needs it). If the replay gets stuck, the schedule would deadlock on real
  processes; deadlock.py's error walks the cycle of waits and marks it in the grid.

Either raises a ScheduleError (errors.py; imported here, where learners import it from). The same
replay, given per-action costs, is the simulator (sim/pipeline.py).
"""

from __future__ import annotations

from collections import Counter
from typing import TypeVar

from .deadlock import validated_replay
from .errors import ScheduleError, index_of
from .ir import Schedule, check_size
from .ops import (
    BACKWARD_FORMS,
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    COMPUTE,
    FORWARD,
    FSDP,
    FULL_BACKWARD,
    OPS,
    RECV_F,
    REDUCE_GRAD,
    RESHARD,
    SEND_B,
    SEND_F,
    SENDS_AND_RECEIVES,
    UNSHARD,
    Action,
    OpType,
    receive_of,
    send_of,
)
from .updates import UpdateProblem

S = TypeVar("S", bound=Schedule)  # validate() returns what it was given, a Rounds as a Rounds
WHOLE_AFTER = frozenset((FULL_BACKWARD, BACKWARD_WEIGHT))  # the backwards after which a stage's gradients are whole

__all__ = ["ScheduleError", "check_structure", "validate"]  # ScheduleError too: learners import it from here


def check_structure(s: Schedule) -> None:
    """Completeness and placement; raises ScheduleError. A Schedule is immutable, so one that
    passed once is not checked again (the simulator checks every schedule it is given)."""
    if not isinstance(s, Schedule):
        raise ValueError(
            f"expected a Schedule (make_schedule('1f1b', p=4, m=8), Schedule.from_text or "
            f"Schedule.custom), got {type(s).__name__}"
        )
    if s.__dict__.get("_structure_checked"):
        return
    check_size(s.p, s.m, s.v)  # a schedule written by hand, as large as make_schedule builds
    _check_structure(s)
    s.__dict__["_structure_checked"] = True  # as functools.cached_property stores its value


def _check_structure(s: Schedule) -> None:
    if len(s.actions) != s.p or len(s.placement) != s.n_stages:
        raise ValueError(
            f"schedule shape is inconsistent: p={s.p}, v={s.v} needs {s.p} action lists and "
            f"{s.n_stages} placement entries, got {len(s.actions)} and {len(s.placement)}"
        )
    if any(not 0 <= r < s.p for r in s.placement):
        raise ValueError(f"placement {s.placement} names a rank outside 0..{s.p - 1}")
    n_stages, m, placement = s.n_stages, s.m, s.placement
    seen: dict[Action, int] = {}  # action -> the rank that runs it
    for r, acts in enumerate(s.actions):
        for i, a in enumerate(acts):
            op, stage, mb = a
            if not 0 <= stage < n_stages or (mb is not None if op in FSDP else mb is None or not 0 <= mb < m):
                raise ScheduleError(
                    s,
                    f"rank {r} runs {a}, which is outside the schedule: stages 0..{n_stages - 1}, micro-batches "
                    f"0..{m - 1} ({', '.join(map(str, sorted(FSDP)))} name a stage and no micro-batch)",
                    [(r, i)],
                )
            if placement[stage] != r:
                raise ScheduleError(
                    s,
                    f"rank {r} runs {a}, but stage {stage} lives on rank {placement[stage]}; "
                    f"move {a} to rank {placement[stage]}'s list",
                    [(r, i)],
                )
            if a in seen and op != UNSHARD and op != RESHARD:  # a stage may be gathered and freed again
                raise ScheduleError(
                    s,
                    f"{a} appears twice (rank {r}); each action runs exactly once, remove one",
                    [index_of(s, a), (r, i)],
                )
            seen[a] = r
    _check_pairs(s)
    if s.explicit_comms:
        _check_sends_and_receives(s)
    if s.fsdp:
        _check_fsdp(s)
    training = not s.forward_only  # a schedule with no backward at all serves; it does not train
    counts = Counter(a.op for a in seen if a.op in COMPUTE)
    cells = n_stages * m
    if counts[FORWARD] == cells and (
        not training or counts[FULL_BACKWARD] == cells and not counts[BACKWARD_INPUT] and not counts[BACKWARD_WEIGHT]
    ):
        _check_updates(s)
        return  # no duplicates and nothing out of range: every cell has its F (and its one B)
    for stage in range(n_stages):
        for mb in range(m):
            owner = placement[stage]
            if Action(FORWARD, stage, mb) not in seen:
                raise ScheduleError(
                    s,
                    f"{Action(FORWARD, stage, mb)} is missing: rank {owner} never runs the "
                    f"forward of micro-batch {mb} on stage {stage}; add it to rank {owner}'s list",
                )
            present = tuple(
                op for op in (FULL_BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT) if Action(op, stage, mb) in seen
            )
            if training and present not in BACKWARD_FORMS:
                raise ScheduleError(
                    s,
                    _backward_problem(present, stage, mb, owner),
                    [index_of(s, Action(op, stage, mb)) for op in present],
                )
    _check_updates(s)


def _check_updates(s: Schedule) -> None:
    """A schedule that updates its weights inside its lists (updates.py) can keep its rule: every
    forward's weight version is made before the forward runs."""
    if s.updates is None:
        return
    try:
        _ = s.versions  # worked out, for what it raises
    except UpdateProblem as problem:
        raise ScheduleError(s, problem.reason, problem.marked) from None


def _positions(s: Schedule) -> dict[Action, tuple[int, int]]:
    return {a: (r, i) for r, acts in enumerate(s.actions) for i, a in enumerate(acts)}


def _check_sends_and_receives(s: Schedule) -> None:
    """A schedule that writes its sends and receives writes every one the computations imply
    (Schedule.messages), each on its rank: the send after the computation whose result it sends,
    the receive before the computation that needs it; and no other."""
    at, owner = _positions(s), s.placement
    consumer = {
        d: (r, i)
        for r, (acts, row) in enumerate(zip(s.actions, s.data_needs_by_rank))
        for i, (a, needs) in enumerate(zip(acts, row))
        if a.op in COMPUTE
        for d in needs
        if owner[d.stage] != r
    }
    wanted = {}
    for d, src, dst in s.messages:
        if d.op == FORWARD and d.stage == s.n_stages - 1:
            raise ScheduleError(
                s,
                f"{d}'s output goes back to stage 0 (a fed-back token), which no send of torch's "
                f"names; leave this schedule's messages to be derived",
            )
        send, recv = send_of(d), receive_of(d)
        wanted[send], wanted[recv] = d, d
        need = s.actions[dst][consumer[d][1]]
        for comm, where, rank in ((send, f"after {d}", src), (recv, f"before {need}", dst)):
            if comm not in at:
                raise ScheduleError(
                    s,
                    f"the schedule writes its sends and receives, but not {comm} (on rank {rank}, "
                    f"{where}); write every one, or none (then they are derived)",
                    [at[d] if comm is send else consumer[d]],
                )
        if at[send] < at[d]:
            raise ScheduleError(
                s, f"rank {src} sends {send} before it computes {d}; move {send} after {d}", [at[send], at[d]]
            )
        if at[recv] > consumer[d]:
            raise ScheduleError(
                s,
                f"rank {dst} receives {recv} after {need}, which needs it; move {recv} before {need}",
                [at[recv], consumer[d]],
            )
    for r, acts in enumerate(s.actions):
        for i, a in enumerate(acts):
            if a.op in SENDS_AND_RECEIVES and a not in wanted:
                forward = a.op == SEND_F or a.op == RECV_F
                sending = a.op == SEND_F or a.op == SEND_B
                peer = a.stage + (1 if forward else -1) * (1 if sending else -1)
                why = (
                    f"there is no stage {peer}"
                    if not 0 <= peer < s.n_stages
                    else f"stage {peer} lives on rank {r} too, so nothing crosses ranks"
                    if owner[peer] == r
                    else "no computation of the schedule moves that (a forward-only schedule has no gradients)"
                )
                raise ScheduleError(s, f"rank {r} runs {a}, but {why}; remove it", [(r, i)])


def _check_fsdp(s: Schedule) -> None:
    """FSDP's actions mean what torch's runtime does with them: a stage's parameters are gathered
    (UNSHARD) before it computes and freed (RESHARD) after, every stage that computes is, each
    gathering is used by a computation before it is freed, and a stage's gradients are reduced
    (REDUCE_GRAD) once, after its last B or W (before or after its RESHARD: torch's runtime runs
    both alike)."""
    sharded = {a.stage for acts in s.actions for a in acts if a.op == UNSHARD or a.op == RESHARD}
    if sharded:
        bare = sorted({a.stage for acts in s.actions for a in acts if a.op in COMPUTE} - sharded)
        if bare:
            k = bare[0]
            raise ScheduleError(
                s,
                f"stage {k} computes without an UNSHARD, while the schedule shards stages "
                f"{', '.join(map(str, sorted(sharded)))}; under FSDP every stage is sharded: add "
                f"{k}UNSHARD before its first computation and {k}RESHARD after its last",
            )
    for r, acts in enumerate(s.actions):
        opened: dict[int, int] = {}  # stage -> the position of its open UNSHARD
        used: set[int] = set()  # stages that computed since their UNSHARD
        last_backward: dict[int, int] = {}
        for i, a in enumerate(acts):
            if a.op in WHOLE_AFTER:
                last_backward[a.stage] = i
        for i, a in enumerate(acts):
            k = a.stage
            if a.op == UNSHARD:
                if k in opened:
                    raise ScheduleError(
                        s,
                        f"rank {r} unshards stage {k} twice without a RESHARD between; remove one",
                        [(r, opened[k]), (r, i)],
                    )
                opened[k] = i
                used.discard(k)
            elif a.op == RESHARD:
                if k not in opened:
                    raise ScheduleError(
                        s,
                        f"rank {r} reshards stage {k} at {a} before unsharding it; add {k}UNSHARD "
                        f"before its computations",
                        [(r, i)],
                    )
                if k not in used:
                    raise ScheduleError(
                        s,
                        f"rank {r} unshards stage {k} and reshards it with no computation of the "
                        f"stage between (torch's runtime refuses to reshard an unshard it has not "
                        f"waited for); remove the two, or move a computation between them",
                        [(r, opened[k]), (r, i)],
                    )
                del opened[k]
            elif a.op in COMPUTE and k in sharded:
                if k not in opened:
                    raise ScheduleError(
                        s,
                        f"rank {r} runs {a} while stage {k}'s parameters are sharded; {k}UNSHARD "
                        f"goes before the stage's first computation and {k}RESHARD after its last",
                        [(r, i)],
                    )
                used.add(k)
            elif a.op == REDUCE_GRAD:
                if k not in last_backward:
                    raise ScheduleError(
                        s,
                        f"rank {r} runs {a}, but stage {k} has no backward: there are no "
                        f"gradients to reduce; remove it",
                        [(r, i)],
                    )
                if i < last_backward[k]:
                    later = acts[last_backward[k]]
                    raise ScheduleError(
                        s,
                        f"rank {r} reduces stage {k}'s gradients ({a}) before its last backward "
                        f"{later}; move {a} after {later}",
                        [(r, i), (r, last_backward[k])],
                    )
        if opened:
            k = min(opened)
            raise ScheduleError(
                s,
                f"rank {r} never reshards stage {k} after its last computation; add {k}RESHARD after it",
                [(r, opened[k])],
            )
    reduced = {a.stage for acts in s.actions for a in acts if a.op == REDUCE_GRAD}
    if reduced:
        backward = {a.stage for acts in s.actions for a in acts if a.op in WHOLE_AFTER}
        if backward - reduced:
            k = min(backward - reduced)
            raise ScheduleError(
                s,
                f"stage {k} never reduces its gradients, while stages "
                f"{', '.join(map(str, sorted(reduced)))} do; add {k}REDUCE_GRAD after its last B "
                f"or W",
            )


def _check_pairs(s: Schedule) -> None:
    """An overlapped pair is a forward followed, in the same list, by a backward (B or I) of
    another stage or micro-batch: the two run at once, so neither may need the other."""
    for r, i in s.paired:
        if not (0 <= r < s.p and 0 <= i < len(s.actions[r]) - 1):
            raise ValueError(
                f"paired names position {i} of rank {r}, but rank {r} has no action there "
                f"followed by another; pair a forward with the backward right after it"
            )
        f, b = s.actions[r][i], s.actions[r][i + 1]
        if (r, i + 1) in s.pair_starts:
            raise ScheduleError(
                s,
                f"{b} is in two pairs (after {f}, and before {s.actions[r][i + 2]}); an action "
                f"pairs with one other at most",
                [(r, i), (r, i + 1)],
            )
        if f.op != "F" or b.op not in ("B", "I"):
            raise ScheduleError(
                s,
                f"({f};{b}) pairs {f} with {b}; an overlapped pair is a forward followed by a backward (B or I)",
                [(r, i), (r, i + 1)],
            )
        if (f.stage, f.mb) == (b.stage, b.mb):
            raise ScheduleError(
                s,
                f"({f};{b}) pairs a backward with its own forward, which it needs; pair {f} "
                f"with the backward of another micro-batch",
                [(r, i), (r, i + 1)],
            )


def _backward_problem(present: tuple[str, ...], stage: int, mb: int, owner: int) -> str:
    where = f"micro-batch {mb} on stage {stage}"
    if not present:
        return (
            f"{stage}B{mb} is missing: rank {owner} never runs the backward of {where}; add it to rank "
            f"{owner}'s list (or split it: {stage}I{mb} and {stage}W{mb})"
        )
    if "B" in present:
        also = " and ".join(f"{stage}{o}{mb}" for o in present[1:])
        return f"{where} has a full backward {stage}B{mb} and also {also} of a split one; keep either B, or I and W"
    missing = "W" if present == ("I",) else "I"
    return (
        f"{Action(OpType(missing), stage, mb)} is missing: a split backward of {where} needs both its "
        f"{OPS['I'].name} ({stage}I{mb}) and its {OPS['W'].name} ({stage}W{mb}); add {stage}{missing}{mb} "
        f"to rank {owner}'s list"
    )


def validate(s: S) -> S:
    """Raise ScheduleError (a ValueError) if `s` cannot run; return it unchanged if it can."""
    check_structure(s)
    validated_replay(s)
    return s
