"""What a pipeline schedule is made of: its actions, typed as PyTorch's pipelining types them.

An action is an op applied to one stage (and one micro-batch), written `{stage}{op}{microbatch}`:
`2F5` is the forward of micro-batch 5 on stage 2, the same text torch's `_Action.from_str` reads.
`OpType` is torch's `_ComputationType`, member for member but its OVERLAP_F_B (a forward and a
backward run as one: minipipe writes that pair as Schedule.paired, printed as torch prints it).

The four computations:

    op  torch's name     needs                                   keeps / frees            sends
    F   FORWARD          the previous stage's F (its output)     keeps the activations    activation to stage s+1
    B   FULL_BACKWARD    its own F, and the next stage's input   frees them               input gradient to s-1
                         gradient (from that stage's B or I)
    I   BACKWARD_INPUT   as B                                    keeps them for W          input gradient to s-1
    W   BACKWARD_WEIGHT  its own I                               frees them               nothing

A micro-batch's backward on a stage is either one B, or an I and a W: zero-bubble schedules split
it so that the I, which the previous stage waits for, runs early, and the W, which nobody waits
for, fills a gap later. One schedule may mix both forms (DualPipe-V does).

Communication is derived from the computations unless a schedule writes it (validate.py checks
what it writes; lowering.py writes the derived one out). torch's names, on the stage that runs them:

    SEND_F    2SEND_F5   stage 2 sends F's output for micro-batch 5 to stage 3's rank (after 2F5)
    RECV_F    3RECV_F5   stage 3 receives it (before 3F5)
    SEND_B    3SEND_B5   stage 3 sends its input gradient to stage 2's rank (after 3B5 or 3I5)
    RECV_B    2RECV_B5   stage 2 receives it (before 2B5 or 2I5)
    UNSHARD   2UNSHARD   FSDP: gather stage 2's parameters (before its computations; no micro-batch)
    RESHARD   2RESHARD   free the gathered parameters again (after them)
    REDUCE_GRAD 2REDUCE_GRAD  reduce stage 2's gradients over the data-parallel ranks (after its
                         last B or W)

This module's tables are read by the validator, the simulator, the executor, the trace and the
pictures; none of them lists the ops again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class OpType(str, Enum):
    """torch.distributed.pipelining's _ComputationType: each member's value is the text torch
    prints and parses (`FORWARD` is "F"); a member equals, and hashes as, that text (a str's own),
    so `a.op == "F"` and `OPS["F"]` read as they always did. (enum.StrEnum, which does the same,
    arrived in Python 3.11; minipipe runs on 3.10.)"""

    def __str__(self) -> str:  # print(op) and f"{op}" show the text, "F", as StrEnum's do
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    FORWARD = "F"
    FULL_BACKWARD = "B"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    REDUCE_GRAD = "REDUCE_GRAD"


FORWARD, FULL_BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = (
    OpType.FORWARD,
    OpType.FULL_BACKWARD,
    OpType.BACKWARD_INPUT,
    OpType.BACKWARD_WEIGHT,
)
SEND_F, RECV_F, SEND_B, RECV_B = OpType.SEND_F, OpType.RECV_F, OpType.SEND_B, OpType.RECV_B
UNSHARD, RESHARD, REDUCE_GRAD = OpType.UNSHARD, OpType.RESHARD, OpType.REDUCE_GRAD

COMPUTE = frozenset((FORWARD, FULL_BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT))
SENDS_AND_RECEIVES = frozenset((SEND_F, RECV_F, SEND_B, RECV_B))
FSDP = frozenset((UNSHARD, RESHARD, REDUCE_GRAD))  # a stage's, not a micro-batch's: no micro-batch


@dataclass(frozen=True)
class Op:
    code: OpType  # the text in an action (`F`, `SEND_F`, ...)
    name: str  # for people
    torch_name: str  # the _ComputationType member's name
    holds: bool  # the micro-batch's activations are held from this op's start ...
    frees: bool  # ... until the end of the op that frees them
    sends: str | None  # what leaves the stage: "activation" (to s+1), "gradient" (to s-1) or nothing
    colour: str  # Okabe-Ito: tellable apart under every common colour-vision deficiency
    ink: str  # a label colour readable on that fill
    glyph: str = ""  # its mark on a terminal timeline (Trace.ascii); computations use the micro-batch


OPS: dict[str, Op] = {
    op.code: op
    for op in (  # the computations
        Op(FORWARD, "forward", "FORWARD", True, False, "activation", "#0072B2", "white"),
        Op(FULL_BACKWARD, "backward", "FULL_BACKWARD", False, True, "gradient", "#E69F00", "black"),
        Op(BACKWARD_INPUT, "input gradient", "BACKWARD_INPUT", False, False, "gradient", "#D55E00", "white"),
        Op(BACKWARD_WEIGHT, "weight gradient", "BACKWARD_WEIGHT", False, True, "nothing", "#009E73", "black"),
    )
}
ALL_OPS: dict[str, Op] = {
    **OPS,
    **{
        op.code: op
        for op in (  # and torch's communication and FSDP actions
            Op(SEND_F, "send activation", "SEND_F", False, False, None, "#56B4E9", "black", ">"),
            Op(RECV_F, "receive activation", "RECV_F", False, False, None, "#56B4E9", "black", "<"),
            Op(SEND_B, "send gradient", "SEND_B", False, False, None, "#F0E442", "black", ">"),
            Op(RECV_B, "receive gradient", "RECV_B", False, False, None, "#F0E442", "black", "<"),
            Op(UNSHARD, "unshard (gather the parameters)", "UNSHARD", False, False, None, "#CC79A7", "black", "u"),
            Op(RESHARD, "reshard (free them)", "RESHARD", False, False, None, "#CC79A7", "black", "r"),
            Op(REDUCE_GRAD, "reduce the gradients", "REDUCE_GRAD", False, False, None, "#999999", "black", "g"),
        )
    },
}
BACKWARD_FORMS = (("B",), ("I", "W"))  # a micro-batch's backward on a stage: one of these, whole
_BY_TEXT: dict[str, OpType] = {t.value: t for t in OpType}


class Action(NamedTuple):
    op: OpType
    stage: int
    mb: int | None = None  # None for a stage's own actions (UNSHARD, RESHARD, REDUCE_GRAD)

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{'' if self.mb is None else self.mb}"

    def __repr__(self) -> str:
        return f"Action({self})"

    @staticmethod
    def parse(text: str) -> Action:
        if not isinstance(text, str):
            raise ValueError(
                f"{text!r} is not an action: write it as text, e.g. '2F5' (forward of micro-batch 5 on "
                f"stage 2), or an Action"
            )
        match = _ACTION_RE.fullmatch(text.strip())
        if not match or (match[2] in FSDP) != (match[3] == ""):
            raise ValueError(
                f"{text!r} is not an action; write {{stage}}{{op}}{{microbatch}} with op one of "
                f"{', '.join(OPS)}, e.g. '2F5' (forward of micro-batch 5 on stage 2), a send or receive "
                f"({', '.join(SEND_RECV_TEXT)}, e.g. '2SEND_F5'), or a stage's {', '.join(FSDP_TEXT)} without "
                f"a micro-batch (e.g. '2UNSHARD')"
            )
        return Action(_BY_TEXT[match[2]], int(match[1]), int(match[3]) if match[3] else None)


def _typed_action(cls: type[Action], op: OpType | str, stage: int, mb: int | None = None) -> Action:
    """An Action's op is always an OpType: "F" given is FORWARD kept (the text a learner writes)."""
    if op.__class__ is not OpType:
        typed = _BY_TEXT.get(op)
        if typed is None:
            raise ValueError(f"{op!r} is not an op; the ops are {', '.join(_BY_TEXT)} (ops.OpType)")
        op = typed
    return tuple.__new__(cls, (op, stage, mb))


# a NamedTuple's own __new__ cannot be written in its class body (nor, for mypy, assigned to)
Action.__new__ = _typed_action  # type: ignore[assignment,method-assign]

SEND_RECV_TEXT = [str(t) for t in (SEND_F, RECV_F, SEND_B, RECV_B)]
FSDP_TEXT = [str(t) for t in (UNSHARD, RESHARD, REDUCE_GRAD)]
# the longest names first, so that a name is never read as the start of another
_ACTION_RE = re.compile(r"(\d+)(" + "|".join(sorted(_BY_TEXT, key=len, reverse=True)) + r")(\d*)")


def F(stage: int, mb: int) -> Action:
    return Action(FORWARD, stage, mb)


def B(stage: int, mb: int) -> Action:
    return Action(FULL_BACKWARD, stage, mb)


def I(stage: int, mb: int) -> Action:  # noqa: E743 - torch's letter for the input gradient
    return Action(BACKWARD_INPUT, stage, mb)


def W(stage: int, mb: int) -> Action:
    return Action(BACKWARD_WEIGHT, stage, mb)


def inputs_of(a: Action, n_stages: int, gradient_op: Callable[[int, int | None], OpType]) -> tuple[Action, ...]:
    """The computations whose results `a` consumes. `gradient_op(stage, mb)` says which op ("B"
    or "I") computes that stage's input gradient in this schedule. A send consumes what it sends;
    a receive and a stage's FSDP actions consume nothing (they are ordered by their rank's list)."""
    op = a.op
    if op == FORWARD:
        return (Action(FORWARD, a.stage - 1, a.mb),) if a.stage > 0 else ()
    if op in (FULL_BACKWARD, BACKWARD_INPUT):
        own = Action(FORWARD, a.stage, a.mb)
        if a.stage == n_stages - 1:
            return (own,)
        return own, Action(gradient_op(a.stage + 1, a.mb), a.stage + 1, a.mb)
    if op == BACKWARD_WEIGHT:
        return (Action(BACKWARD_INPUT, a.stage, a.mb),)
    if op == SEND_F:
        return (Action(FORWARD, a.stage, a.mb),)
    if op == SEND_B:
        return (Action(gradient_op(a.stage, a.mb), a.stage, a.mb),)
    return ()


def boundary(producer: Action) -> int:
    """Which stage boundary a message crosses: the output of stage k is boundary k. A forward (or
    its send) of stage s sends boundary s; a backward (B or I, or its send) of stage s sends the
    gradient of boundary s - 1."""
    return producer.stage if producer.op == FORWARD or producer.op == SEND_F else producer.stage - 1


def send_of(producer: Action) -> Action:
    """The explicit send of a computation's result to the neighbouring stage."""
    return Action(SEND_F if producer.op == FORWARD else SEND_B, producer.stage, producer.mb)


def receive_of(producer: Action) -> Action:
    """The explicit receive, on the consuming stage, of what `producer` sends."""
    if producer.op == FORWARD:
        return Action(RECV_F, producer.stage + 1, producer.mb)
    return Action(RECV_B, producer.stage - 1, producer.mb)


def producer_of(comm: Action, gradient_op: Callable[[int, int | None], OpType]) -> Action:
    """The computation whose result a send or a receive moves."""
    if comm.op == SEND_F:
        return Action(FORWARD, comm.stage, comm.mb)
    if comm.op == SEND_B:
        return Action(gradient_op(comm.stage, comm.mb), comm.stage, comm.mb)
    if comm.op == RECV_F:
        return Action(FORWARD, comm.stage - 1, comm.mb)
    return Action(gradient_op(comm.stage + 1, comm.mb), comm.stage + 1, comm.mb)
