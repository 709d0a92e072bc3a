"""Activation recomputation, one model for the engine, the simulator and the planner: what each option
keeps for the backward, and what the backward runs again first. No torch.

## Which layers (the engine and the simulator)

The options (`RunConfig(recompute=...)`, `minipipe train --recompute`):

    "none"      every activation a stage's backward needs is kept from its forward to its backward
    "stage"     each stage keeps only its input; its backward first runs the stage's forward again
                (GPipe's re-materialisation: Huang et al. 2019 keep only the partition boundaries)
    layers      a list of the model's layer indices, e.g. [1, 2]: those layers keep only their input
                and run again in the backward; the others keep everything (Megatron's "full"
                recomputation of chosen blocks; every layer chosen is its per-layer uniform form)

Time. A recomputing backward costs F_r + B, where F_r is the forward of what it recomputes: the
stage's whole forward for "stage", the chosen layers' share of it for layers. A split backward
recomputes in its I (the input gradient needs the activations); W costs what it did. So the
simulator's `Costs(recompute=share)` adds share × F to each stage's B and I, and nothing to W.

Memory, per micro-batch on a stage. Between its forward and its backward it holds `kept` bytes:
the input of each recomputed run of layers plus everything the other layers keep (for "none",
all of it: `full`). When its backward starts, the recomputed runs rebuild their activations, and
the micro-batch holds up to `full` until its backward ends (a B) or its W does (an I and a W: the
weight gradients need them too). `activation_peak` replays that on a Trace
(with the sizes course.recompute_measured.stage_bytes measures on the real stages).

## Inside a block (the planner)

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
one block's worth, not one per micro-batch.

The two meet where they overlap: recomputing a chosen layer (or a whole stage) is the "full" option
for that layer, so the planner's "full" is the engine's recompute of every block, timed the same
way (a recomputing backward costs the redone forward first, backward_cost); "selective" redoes
less than a layer and so lives only in the planner, which counts activations by formula
(planner/shapes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..trace import Trace, held_curve

OPTIONS = ("none", "stage")  # or a list of layer indices


@dataclass(frozen=True)
class Recompute:
    """A parsed recompute option: `mode` "none", "stage" or "layers" (then `layers`, sorted)."""

    mode: str = "none"
    layers: tuple[int, ...] = ()

    @property
    def on(self) -> bool:
        return self.mode != "none"

    def of_stage(self, stage_layers: Sequence[int]) -> list[bool]:
        """For each of a stage's layers (their indices in the model), whether it is recomputed."""
        if self.mode == "stage":
            return [True] * len(stage_layers)
        chosen = set(self.layers)
        return [i in chosen for i in stage_layers]

    def share(self, stage_layers: Sequence[int], layer_forward: Sequence[float] | None = None) -> float:
        """The part of a stage's forward its backward runs again: 1 for "stage", the chosen layers'
        share (by `layer_forward` times when given, else by count) for layers, 0 for "none"."""
        flags = self.of_stage(stage_layers)
        if not flags:
            return 0.0
        cost = list(layer_forward) if layer_forward is not None else [1.0] * len(flags)
        total = sum(cost)
        return sum(c for c, f in zip(cost, flags) if f) / total if total else 0.0

    def __str__(self) -> str:
        return self.mode if self.mode != "layers" else "layers " + ",".join(map(str, self.layers))


def parse(value: Any, n_layers: int | None = None) -> Recompute:
    """ "none", "stage", a Recompute, or a list of layer indices (also as text: "1,2,5"); ValueError
    saying what to write otherwise."""
    if isinstance(value, Recompute):
        return parse(list(value.layers), n_layers) if value.mode == "layers" else value
    if value is None or value is False:
        return Recompute()
    if value is True:
        return Recompute("stage")
    if isinstance(value, str):
        text = value.strip().lower()
        if text in OPTIONS:
            return Recompute(text)
        try:
            value = [int(part) for part in text.split(",") if part.strip()]  # int() takes " 2 "; "1 2" is no list
        except ValueError:
            raise ValueError(
                f"unknown recompute {value!r}; choose 'none', 'stage' (each stage's whole forward "
                f"again in its backward) or a list of layer indices such as [1, 2] or '1,2'"
            ) from None
    try:
        given = list(value)
    except TypeError:
        raise ValueError(f"recompute must be 'none', 'stage' or a list of layer indices, got {value!r}") from None
    wrong = [i for i in given if isinstance(i, bool) or not isinstance(i, int)]
    if wrong:  # 1.7 is not layer 1, True is not layer 1
        raise ValueError(
            f"recompute layers must be whole-number layer indices such as [1, 2]; got {wrong[0]!r} in {str(given)[:80]}"
        )
    twice = sorted({i for i in given if given.count(i) > 1})
    if twice:
        raise ValueError(
            f"recompute lists layer{'s' if len(twice) > 1 else ''} {', '.join(map(str, twice))} more than "
            f"once; name each layer once"
        )
    layers = sorted(given)
    if not layers:
        raise ValueError("recompute names no layers; give their indices, e.g. [1, 2], or use 'none'")
    if layers[0] < 0 or (n_layers is not None and layers[-1] >= n_layers):
        top = f"0..{n_layers - 1}" if n_layers is not None else "0 or more"
        raise ValueError(f"recompute layers {layers} must be layer indices {top} of the model")
    return Recompute("layers", tuple(layers))


# -- inside a block: what the planner's options keep and redo ----------------------------------
ACTIVATION_PARTS = ("input", "attention scores", "other")
WORK_PARTS = ("attention core", "other")


@dataclass(frozen=True)
class BlockOption:
    name: str
    summary: str
    keeps: frozenset[str]  # parts of a block's saved tensors kept until its backward
    redoes: frozenset[str]  # parts of the block's forward work its backward repeats first

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


BLOCK_OPTIONS: dict[str, BlockOption] = {
    "none": BlockOption("none", "keep every tensor the forward saves", frozenset(ACTIVATION_PARTS), frozenset()),
    "selective": BlockOption(
        "selective",
        "drop attention's s×s scores and redo QKᵀ, softmax and AV in the backward (no collective)",
        frozenset({"input", "other"}),
        frozenset({"attention core"}),
    ),
    "full": BlockOption(
        "full",
        "keep each block's input only and rerun its whole forward, collectives included, before its backward",
        frozenset({"input"}),
        frozenset(WORK_PARTS),
    ),
}
BLOCK_NAMES = tuple(BLOCK_OPTIONS)


def block_option(name: str | BlockOption) -> BlockOption:
    """The per-block option called `name`; a ValueError naming the choices otherwise."""
    if isinstance(name, BlockOption):
        return name
    if name not in BLOCK_OPTIONS:
        raise ValueError(f"unknown recompute {name!r}; choose one of {', '.join(BLOCK_OPTIONS)}")
    return BLOCK_OPTIONS[name]


def backward_cost(forward: float, backward: float, share: float) -> float:
    """What a recomputing backward costs: the recomputed share of the forward, then the backward."""
    return backward + share * forward


def activation_curve(
    trace: Trace, rank: int, kept: Sequence[float], during: Sequence[float], during_split: Sequence[float] | None = None
) -> list[tuple[float, float]]:
    """(time, bytes) steps of the activations `rank` holds in `trace`: stage s holds `kept[s]`
    bytes of a micro-batch from its forward on, and up to `during[s]` from the start of its B to
    its end — or `during_split[s]` (default: `during`) from the start of its I to the end of its
    W. course.recompute_measured.stage_bytes measures the three on the real stages."""
    if trace.schedule.forward_only:
        return [(trace.start, 0.0)]
    split = during if during_split is None else during_split
    deltas: list[tuple[float, float]] = []
    for e in trace.rank_events(rank):
        s, op = e.action.stage, e.action.op
        if op == "F":
            deltas.append((e.start, kept[s]))
        elif op == "B":
            deltas += [(e.start, during[s] - kept[s]), (e.end, -during[s])]
        elif op == "I":
            deltas.append((e.start, split[s] - kept[s]))
        elif op == "W":
            deltas.append((e.end, -split[s]))
    return held_curve(deltas, trace.start)


def activation_peak(
    trace: Trace, kept: Sequence[float], during: Sequence[float], during_split: Sequence[float] | None = None
) -> list[float]:
    """Each rank's peak activation bytes in `trace` (activation_curve's highest step)."""
    return [max(b for _, b in activation_curve(trace, r, kept, during, during_split)) for r in range(trace.p)]
