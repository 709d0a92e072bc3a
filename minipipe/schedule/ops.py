"""The four computations a pipeline schedule is made of, named as PyTorch's pipelining names them.

An action is an op applied to one stage and one micro-batch, written `{stage}{op}{microbatch}`:
`2F5` is the forward of micro-batch 5 on stage 2, the same text torch's `_Action.from_str` reads.

    op  torch's name     needs                                   keeps / frees            sends
    F   FORWARD          the previous stage's F (its output)     keeps the activations    activation to stage s+1
    B   FULL_BACKWARD    its own F, and the next stage's input   frees them               input gradient to s-1
                         gradient (from that stage's B or I)
    I   BACKWARD_INPUT   as B                                    keeps them for W          input gradient to s-1
    W   BACKWARD_WEIGHT  its own I                               frees them               nothing

A micro-batch's backward on a stage is either one B, or an I and a W: zero-bubble schedules split
it so that the I, which the previous stage waits for, runs early, and the W, which nobody waits
for, fills a gap later. One schedule may mix both forms (DualPipe-V does). This table is read by
the validator, the simulator, the executor, the trace and the pictures; none of them lists the
ops again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple


@dataclass(frozen=True)
class Op:
    code: str           # the letter in the text form
    name: str           # for people
    torch_name: str     # torch.distributed.pipelining's _ComputationType
    holds: bool         # the micro-batch's activations are held from this op's start ...
    frees: bool         # ... until the end of the op that frees them
    sends: str | None   # what leaves the stage: "activation" (to s+1), "gradient" (to s-1) or nothing
    colour: str         # Okabe-Ito: tellable apart under every common colour-vision deficiency
    ink: str            # a label colour readable on that fill


OPS: dict[str, Op] = {op.code: op for op in (
    Op("F", "forward", "FORWARD", True, False, "activation", "#0072B2", "white"),
    Op("B", "backward", "FULL_BACKWARD", False, True, "gradient", "#E69F00", "black"),
    Op("I", "input gradient", "BACKWARD_INPUT", False, False, "gradient", "#D55E00", "white"),
    Op("W", "weight gradient", "BACKWARD_WEIGHT", False, True, "nothing", "#009E73", "black"),
)}
BACKWARD_FORMS = (("B",), ("I", "W"))   # a micro-batch's backward on a stage: one of these, whole


class Action(NamedTuple):
    op: str
    stage: int
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.mb}"

    def __repr__(self) -> str:
        return f"Action({self})"

    @staticmethod
    def parse(text: str) -> "Action":
        match = _ACTION_RE.fullmatch(text.strip())
        if not match:
            raise ValueError(
                f"{text!r} is not an action; write {{stage}}{{op}}{{microbatch}} with op one of "
                f"{', '.join(OPS)}, e.g. '2F5' (forward of micro-batch 5 on stage 2)")
        return Action(match[2], int(match[1]), int(match[3]))


_ACTION_RE = re.compile(rf"(\d+)([{''.join(OPS)}])(\d+)")


def F(stage: int, mb: int) -> Action:
    return Action("F", stage, mb)


def B(stage: int, mb: int) -> Action:
    return Action("B", stage, mb)


def I(stage: int, mb: int) -> Action:  # noqa: E743 - torch's letter for the input gradient
    return Action("I", stage, mb)


def W(stage: int, mb: int) -> Action:
    return Action("W", stage, mb)


def inputs_of(a: Action, n_stages: int, gradient_op: Callable[[int, int], str]) -> tuple[Action, ...]:
    """The actions whose results `a` consumes. `gradient_op(stage, mb)` says which op ("B" or "I")
    computes that stage's input gradient in this schedule."""
    if a.op == "F":
        return (F(a.stage - 1, a.mb),) if a.stage > 0 else ()
    if a.op in ("B", "I"):
        own = F(a.stage, a.mb)
        if a.stage == n_stages - 1:
            return (own,)
        return own, Action(gradient_op(a.stage + 1, a.mb), a.stage + 1, a.mb)
    return (I(a.stage, a.mb),)   # W


def boundary(producer: Action) -> int:
    """Which stage boundary a message crosses: the output of stage k is boundary k. A forward of
    stage s sends boundary s; a backward (B or I) of stage s sends the gradient of boundary s - 1."""
    return producer.stage if producer.op == "F" else producer.stage - 1
