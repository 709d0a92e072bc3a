"""Activation recomputation as a cost model: what each option keeps, and what it runs again. No torch.

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
(with the sizes engine.recompute.stage_bytes measures on the real stages).

For the planner, which counts a transformer's activations by formula (planner/sizing.py), the same
model reads: kept = the recomputed blocks' inputs + the others' activations; while a backward runs,
one recomputed block's activations more (a B frees each block's before the next one is rebuilt).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

OPTIONS = ("none", "stage")      # or a list of layer indices


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


def parse(value, n_layers: int | None = None) -> Recompute:
    """"none", "stage", a Recompute, or a list of layer indices (also as text: "1,2,5"); ValueError
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
            value = [int(part) for part in text.replace(" ", "").split(",") if part]
        except ValueError:
            raise ValueError(f"unknown recompute {value!r}; choose 'none', 'stage' (each stage's whole forward "
                             f"again in its backward) or a list of layer indices such as [1, 2] or '1,2'") from None
    try:
        layers = sorted({int(i) for i in value})
    except (TypeError, ValueError):
        raise ValueError(f"recompute must be 'none', 'stage' or a list of layer indices, got {value!r}") from None
    if not layers:
        raise ValueError("recompute names no layers; give their indices, e.g. [1, 2], or use 'none'")
    if any(isinstance(i, bool) for i in value) or layers[0] < 0 or (n_layers is not None and layers[-1] >= n_layers):
        top = f"0..{n_layers - 1}" if n_layers is not None else "0 or more"
        raise ValueError(f"recompute layers {layers} must be layer indices {top} of the model")
    return Recompute("layers", tuple(layers))


def backward_cost(forward: float, backward: float, share: float) -> float:
    """What a recomputing backward costs: the recomputed share of the forward, then the backward."""
    return backward + share * forward


def activation_curve(trace, rank: int, kept: Sequence[float], during: Sequence[float],
                     during_split: Sequence[float] | None = None) -> list[tuple[float, float]]:
    """(time, bytes) steps of the activations `rank` holds in `trace`: stage s holds `kept[s]`
    bytes of a micro-batch from its forward on, and up to `during[s]` from the start of its B to
    its end — or `during_split[s]` (default: `during`) from the start of its I to the end of its
    W. engine.recompute.stage_bytes measures the three on the real stages."""
    if trace.schedule.forward_only:
        return [(trace.start, 0.0)]
    split = during if during_split is None else during_split
    deltas = []
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
    deltas.sort(key=lambda d: (d[0], d[1]))       # at a tie, free before allocating
    curve, held = [(trace.start, 0.0)], 0.0
    for t, d in deltas:
        held += d
        curve.append((t, held))
    return curve


def activation_peak(trace, kept: Sequence[float], during: Sequence[float],
                    during_split: Sequence[float] | None = None) -> list[float]:
    """Each rank's peak activation bytes in `trace` (activation_curve's highest step)."""
    return [max(b for _, b in activation_curve(trace, r, kept, during, during_split)) for r in range(trace.p)]
