"""A schedule's derived actions written out: its sends and receives, and FSDP's unshards and reshards.

torch calls these lowering passes (`_add_send_recv`, `_add_unshard_reshard`, `_add_reduce_grad`):
a schedule of computations becomes one that says when each message leaves and arrives and when
each stage's parameters are gathered and freed. minipipe derives all of it where a schedule does
not write it; written out, it can be read, changed by hand, drawn, checked by the validator and
handed to torch's runtime, which runs exactly what it is given ("compute_comms").

    with_sends_and_receives(s)   each message of s.messages: its SEND right after the computation
                                 it sends, its RECV right before the computation that needs it
    with_fsdp(s)                 each stage's UNSHARD before its first computation, its RESHARD after
                                 its last, its REDUCE_GRAD after its last B or W (before the RESHARD):
                                 every stage gathered for the whole step, as torchtitan keeps them under
                                 a pipeline (reshard_after_forward=False)

An overlapped pair (Schedule.paired) stays one piece: what goes before either of its two goes
before the pair, what goes after either goes after it. Neither pass changes what is computed, or
when, on the cost model: the simulator gives the written-out schedule the computations' times of
the one it came from.
"""

from __future__ import annotations

from .ir import Schedule
from .ops import COMPUTE, REDUCE_GRAD, RESHARD, UNSHARD, Action, receive_of, send_of
from .validate import WHOLE_AFTER, validate


def with_sends_and_receives(s: Schedule) -> Schedule:
    """`s` with its sends and receives written (unchanged if it writes them already)."""
    if s.explicit_comms:
        return s
    before: dict[Action, list[Action]] = {}
    after: dict[Action, list[Action]] = {}
    consumer = {
        d: a
        for acts, row in zip(s.actions, s.data_needs_by_rank)
        for a, needs in zip(acts, row)
        if a.op in COMPUTE
        for d in needs
        if s.placement[d.stage] != s.placement[a.stage]
    }
    for d, _, _ in s.messages:
        after.setdefault(d, []).append(send_of(d))
        before.setdefault(consumer[d], []).append(receive_of(d))
    return _inserted(s, before, after)


def with_fsdp(s: Schedule) -> Schedule:
    """`s` with FSDP's UNSHARD, RESHARD and REDUCE_GRAD for every stage (unchanged if it writes
    any of them already)."""
    if s.fsdp:
        return s
    before: dict[Action, list[Action]] = {}
    after: dict[Action, list[Action]] = {}
    for acts in s.actions:
        first: dict[int, Action] = {}
        last: dict[int, Action] = {}
        last_backward: dict[int, Action] = {}
        for a in acts:
            if a.op in COMPUTE:
                first.setdefault(a.stage, a)
                last[a.stage] = a
                if a.op in WHOLE_AFTER:
                    last_backward[a.stage] = a
        for k, a in first.items():
            before.setdefault(a, []).append(Action(UNSHARD, k))
        for k, a in last_backward.items():
            after.setdefault(a, []).append(Action(REDUCE_GRAD, k))
        for k, a in last.items():
            after.setdefault(a, []).append(Action(RESHARD, k))
    return _inserted(s, before, after)


def _inserted(s: Schedule, before: dict[Action, list[Action]], after: dict[Action, list[Action]]) -> Schedule:
    """`s` with `before[a]` put before each action a and `after[a]` after it, a pair kept whole."""
    lists, paired = [], []
    for r, acts in enumerate(s.actions):
        row: list[Action] = []
        i = 0
        while i < len(acts):
            piece = acts[i : i + 2] if (r, i) in s.pair_starts else acts[i : i + 1]
            for a in piece:
                row += before.get(a, ())
            if len(piece) == 2:
                paired.append((r, len(row)))
            row += piece
            for a in piece:
                row += after.get(a, ())
            i += len(piece)
        lists.append(row)
    return validate(Schedule.build(s.kind, s.p, s.m, s.v, lists, s.placement, paired, s.updates))
