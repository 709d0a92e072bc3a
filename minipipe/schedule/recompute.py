"""Activation recomputation: what a block's forward keeps for its backward, and what the backward
redoes first. One table, so that the planner's memory and time, the simulator's costs and the
engine's checkpointing mean the same thing by "selective" or "full".

A transformer block's forward saves tensors for its backward. They fall into three parts:

    "input"             the block's input (the first norm's input)
    "attention scores"  what attention keeps per pair of positions: the s×s softmax output, and
                        with dropout its mask and output (nothing with a fused attention, which
                        keeps one log-sum-exp per head and position instead)
    "other"             everything else: the norms' inputs and statistics, Q, K, V, attention's
                        output, the MLP's inner activations, the dropout masks

and its work into two:

    "attention core"    QKᵀ, the softmax (and its dropout) and AV: no tensor-parallel collective
                        inside, so redoing it costs compute only
    "other"             the matmuls, the norms and element-wise work, and the tensor-parallel
                        collectives between them

An option keeps some parts and redoes some work: "none" keeps everything, "selective" drops the
scores and redoes the attention core (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", §5), "full" keeps only the input and reruns the whole forward before
the backward (Chen et al. 2016; Megatron-LM's full recomputation, one block at a time). While a
block is recomputed, the parts it dropped exist again for the span of that block's backward:
one block's worth, not one per micro-batch. No torch here: ops.py says what each action needs
and keeps; this says how recomputation changes it.
"""
from __future__ import annotations

from dataclasses import dataclass

ACTIVATION_PARTS = ("input", "attention scores", "other")
WORK_PARTS = ("attention core", "other")


@dataclass(frozen=True)
class Recompute:
    name: str
    summary: str
    keeps: frozenset        # parts of a block's saved tensors kept until its backward
    redoes: frozenset       # parts of the block's forward work its backward repeats first

    def kept(self, parts: dict[str, float]) -> float:
        """What a block keeps, per micro-batch, of its activations by part (ACTIVATION_PARTS)."""
        return sum(v for k, v in parts.items() if k in self.keeps)

    def transient(self, parts: dict[str, float]) -> float:
        """What recomputing one block brings back for the span of its backward: the parts it dropped."""
        return sum(v for k, v in parts.items() if k not in self.keeps)

    def redone(self, work: dict[str, float]) -> float:
        """What the backward repeats of one block's forward work by part (WORK_PARTS): FLOPs,
        seconds or collectives alike."""
        return sum(v for k, v in work.items() if k in self.redoes)


OPTIONS: dict[str, Recompute] = {
    "none": Recompute("none", "keep every tensor the forward saves", frozenset(ACTIVATION_PARTS), frozenset()),
    "selective": Recompute(
        "selective", "drop attention's s×s scores and redo QKᵀ, softmax and AV in the backward (no collective)",
        frozenset({"input", "other"}), frozenset({"attention core"})),
    "full": Recompute(
        "full", "keep each block's input only and rerun its whole forward, collectives included, before its "
        "backward", frozenset({"input"}), frozenset(WORK_PARTS)),
}
NAMES = tuple(OPTIONS)


def get(name: str | Recompute) -> Recompute:
    """The option called `name`; a ValueError naming the choices otherwise."""
    if isinstance(name, Recompute):
        return name
    if name not in OPTIONS:
        raise ValueError(f"unknown recompute {name!r}; choose one of {', '.join(OPTIONS)}")
    return OPTIONS[name]
