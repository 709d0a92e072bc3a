"""The hook that lets your own code run a stage's forward and backward inside the workers.

    RunConfig(stage_step=my_step)            # my_step(stage, baton), called for every F and B

The executor (execute.py) calls the hook for every F and B of a schedule in place of its own
receive-compute-send (stage.py's Stage.forward and Stage.backward), on every rank; a function
defined in a notebook reaches the workers by value (custom.Sendable). What the hook gets is
`Baton` below; what it must do with it is the exercise "pass the baton" (exercises/), which
has the learner write it.
"""

from __future__ import annotations

import torch

from ..schedule.ops import Action
from .stage import Stage


class Baton:
    """What a `stage_step(stage, baton)` hook gets for one F or B of one micro-batch on its stage.

    baton.op, baton.mb        "F" or "B", and the micro-batch
    baton.inputs, baton.target  the micro-batch's inputs (first stage's F) and targets (last stage's
                              F); None elsewhere
    baton.receive()           F: the previous stage's output; B: the gradient of this stage's output,
                              from the next stage. Not on the first stage's F (its input is
                              baton.inputs) nor the last stage's B (its backward starts at the loss)
    baton.send(tensor)        F: this stage's output, to the next stage; on the last stage, the
                              micro-batch's loss (already divided by m), reported as the step's loss.
                              B: the gradient of this stage's input, to the previous stage (not on
                              the first stage)

    Each happens once per action where it applies; a hook that skips one, or sends what the
    neighbour cannot use, is stopped with an error that says which. The stage (stage.py) offers
    `module`, `loss_fn`, `m`, `is_first`, `is_last`, and `saved`, a dict for what F keeps for B:
    it must be empty again at the end of a step. An action's traced span includes the hook's waits.
    """

    def __init__(self, action: Action, stage: Stage, inputs, targets, take, hand_on, gradient_op, shapes):
        self.action, self.op, self.mb = action, action.op, action.mb
        self.stage = stage
        self.inputs = inputs[action.mb] if action.op == "F" and stage.is_first else None
        self.target = targets[action.mb] if action.op == "F" and stage.is_last else None
        self._take, self._hand_on, self._gradient_op, self._shapes = take, hand_on, gradient_op, shapes
        self.received = self.sent = False

    @property
    def _needs_receive(self) -> bool:
        return not (self.stage.is_first if self.op == "F" else self.stage.is_last)

    @property
    def _needs_send(self) -> bool:
        return self.op == "F" or not self.stage.is_first

    def receive(self) -> torch.Tensor:
        a = self.action
        if not self._needs_receive:
            raise RuntimeError(
                f"{a}: stage {a.stage} is the {'first' if self.op == 'F' else 'last'}, so its "
                + (
                    "forward has nothing to receive: its input is baton.inputs"
                    if self.op == "F"
                    else "backward has nothing to receive: it starts from the loss its forward kept"
                )
            )
        if self.received:
            raise RuntimeError(f"{a}: receive() was called twice; each action receives once")
        self.received = True
        producer = (
            Action("F", a.stage - 1, a.mb)
            if self.op == "F"
            else Action(self._gradient_op(a.stage + 1, a.mb), a.stage + 1, a.mb)
        )
        return self._take(producer, a)

    def send(self, tensor) -> None:
        a = self.action
        what = ("the loss" if self.stage.is_last else "its output") if self.op == "F" else "the gradient of its input"
        if not self._needs_send:
            raise RuntimeError(f"{a}: stage {a.stage} is the first, so its backward has no one to send to")
        if self.sent:
            raise RuntimeError(f"{a}: send() was called twice; each action sends once")
        if not torch.is_tensor(tensor):
            raise TypeError(
                f"{a}: send() takes a tensor ({what}), got {type(tensor).__name__}"
                + (
                    ". x.grad stays None unless the received input was made a leaf that requires "
                    "grad (x.requires_grad_()) before the forward"
                    if tensor is None and self.op == "B"
                    else ""
                )
            )
        self.sent = True
        if self.op == "F" and self.stage.is_last:
            if tensor.numel() != 1:
                raise ValueError(
                    f"{a}: the last stage's forward sends the micro-batch's loss, one number; got a "
                    f"tensor of shape {tuple(tensor.shape)}"
                )
            self.stage.losses[a.mb] = tensor.detach()
            return
        boundary = a.stage if self.op == "F" else a.stage - 1
        shape = tuple(self._shapes[boundary][0])
        if tuple(tensor.shape) != shape:
            raise ValueError(
                f"{a}: sent a tensor of shape {tuple(tensor.shape)}, but {what} is {shape} "
                f"(the output of stage {boundary})"
            )
        self._hand_on(a, tensor.detach())

    def finish(self) -> None:
        """After the hook: what it had to do and did not."""
        a = self.action
        if self._needs_receive and not self.received:
            raise RuntimeError(
                f"{a}: the hook never called baton.receive(); the "
                + ("previous stage's output" if self.op == "F" else "gradient from the next stage")
                + " is what it computes from"
            )
        if self._needs_send and not self.sent:
            raise RuntimeError(
                f"{a}: the hook never called baton.send(); "
                + (
                    "the loss must be sent"
                    if self.op == "F" and self.stage.is_last
                    else "the neighbouring stage waits for it"
                )
            )
        self.stage.peak_held = max(self.stage.peak_held, len(self.stage.saved))
