"""Activation recomputation: a stage that keeps less between its forward and its backward, and runs
part of its forward again when the backward comes (the cost model: sim/recompute_costs.py).

The stage's layers are cut into runs: one run for the whole stage ("stage"), or, when layers are
chosen, each chosen layer a run of its own (Megatron's per-layer checkpoints) and the layers
between in runs that keep everything as usual. The forward runs every recomputed run under
`torch.no_grad` and keeps only its input (and the random state, so that a dropout draws the same
mask again); the other runs record their graph, each from its own input. The backward goes
through the runs from the last: a recomputed run first runs its forward again, with its graph,
then its backward. A B lets each run's activations go as it passes, so layer-by-layer
recomputation holds one layer's more at most; a split backward (I, then W) keeps the rebuilt
graphs until the W, whose weight gradients need them, and runs each weighted module's own
backward as Stage does.

Same math: the rebuilt graph computes the numbers the first forward did. Not handled, as in
torch.utils.checkpoint: layers whose forward changes state (BatchNorm's running statistics are
updated twice). Tensor-parallel layers run their collectives again in the rebuild, as Megatron's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .stage import SavedBytes, Stage


def runs_of(flags: list[bool], per_layer: bool) -> list[tuple[int, int, bool]]:
    """(start, end, recomputed) runs covering a stage's layers: each recomputed layer a run of its
    own when `per_layer`, else together with its recomputed neighbours; the others in maximal runs."""
    out: list[tuple[int, int, bool]] = []
    for i, flag in enumerate(flags):
        if out and out[-1][2] == flag and not (flag and per_layer):
            out[-1] = (out[-1][0], i + 1, flag)
        else:
            out.append((i, i + 1, flag))
    return out


@dataclass
class _Part:
    """One run's share of one micro-batch."""

    input: torch.Tensor
    output: torch.Tensor | None  # None while a recomputed run waits for its backward
    state: tuple | None = None  # the random state its forward began with (recomputed runs)
    weighted: list = field(default_factory=list)  # (module, output) of its weighted modules (split)


class RecomputingStage(Stage):
    """A Stage whose chosen layers keep only their input from F until its backward.

    flags: for each of the stage's layers, whether it is recomputed; per_layer: each recomputed
    layer a run of its own (chosen layers), rather than one run for them all (the whole stage)."""

    def __init__(
        self,
        index: int,
        module: nn.Sequential,
        n_stages: int,
        n_microbatches: int,
        loss_fn=None,
        split_backward: bool = False,
        held=None,
        *,
        flags: list[bool],
        per_layer: bool,
    ):
        super().__init__(index, module, n_stages, n_microbatches, loss_fn, split_backward, held)
        self.runs = [(module[a:b], recomputed) for a, b, recomputed in runs_of(flags, per_layer)]
        self.parts: dict[int, list[_Part]] = {}
        self.targets: dict[int, torch.Tensor] = {}  # the last stage's, for a recomputed loss
        self.rebuilt_bytes: list[int | None] = [None] * len(self.runs)  # what each run's rebuild keeps
        self.backward_peak = 0  # most bytes one micro-batch held in its backward
        self._rebuilt: dict[int, int] = {}  # mb -> rebuilt bytes it holds now
        self._mine = 0  # bytes the micro-batch in its backward holds

    # -- forward: the recomputed runs keep their input only ------------------------------------
    def forward(self, mb: int, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor | None:
        if not self.is_first:
            x = x.detach().requires_grad_(True)  # a leaf, so backward stops here and fills x.grad
        counter = SavedBytes(self._param_storages) if self.bytes_per_microbatch is None else None
        parts, h = [], x
        for k, (_, recomputed) in enumerate(self.runs):
            if k > 0:  # each run from a leaf of its own
                h = h.detach().requires_grad_(True)
            part = _Part(h, None)
            if recomputed:
                part.state = _random_state(h.device)
                with torch.no_grad():
                    out = self._through(k, h, target)
                if counter is not None:
                    counter.pack(h)  # what a recomputed run keeps: its input
            else:
                out = self._recorded(k, h, target, part.weighted, counter)
                part.output = out
            parts.append(part)
            h = out
        if self.is_last and self.runs[-1][1]:
            self.targets[mb] = target  # data, not an activation: counted where the loss saves it
        if counter is not None:
            self.bytes_per_microbatch = counter.total
        self.parts[mb] = parts
        self.saved[mb] = (x, h)
        self.held.add(self.bytes_per_microbatch)
        self.peak_held = max(self.peak_held, len(self.saved))
        if self.is_last:
            self.losses[mb] = h.detach()
            return None
        return h.detach()

    def _through(self, k: int, h, target):
        out = self.runs[k][0](h)
        return self.loss_fn(out, target) / self.m if self.is_last and k == len(self.runs) - 1 else out

    def _recorded(self, k: int, h, target, weighted: list, counter: SavedBytes | None):
        """Run k with its graph, keeping its weighted modules' outputs (split) and counting the
        bytes autograd saves (when `counter`)."""
        self._capture = weighted if self.split else None
        try:
            if counter is None:
                return self._through(k, h, target)
            with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
                return self._through(k, h, target)
        finally:
            self._capture = None

    def _rebuild(self, mb: int, k: int) -> torch.Tensor:
        """Run k's forward again, with its graph, from its kept input and random state."""
        part = self.parts[mb][k]
        first = self.rebuilt_bytes[k] is None
        counter = SavedBytes(self._param_storages).counted(part.input) if first else None
        devices = [part.input.device] if part.input.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            _set_random_state(part.state, part.input.device)
            part.output = self._recorded(k, part.input, self.targets.get(mb), part.weighted, counter)
        if first:
            self.rebuilt_bytes[k] = counter.total
        self._hold(mb, self.rebuilt_bytes[k])
        return part.output

    # -- backward: the runs from the last, each rebuilt first if it was recomputed --------------
    def backward(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        self._mine = self.bytes_per_microbatch or 0
        for k in reversed(range(len(self.runs))):
            part = self.parts[mb][k]
            out = part.output if part.output is not None else self._rebuild(mb, k)
            torch.autograd.backward(out, grad)
            grad = part.input.grad if part.input.requires_grad else None
            self.parts[mb][k] = _Part(part.input, None)  # its graph is done: let its tensors go
            if self.runs[k][1]:
                self._hold(mb, -self.rebuilt_bytes[k])
        self._release(mb)
        return None if self.is_first else grad

    def backward_input(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        if not self.split:
            raise RuntimeError(f"stage {self.index} was built without split_backward; an I/W backward needs it")
        self._mine = self.bytes_per_microbatch or 0
        for k in reversed(range(len(self.runs))):
            part = self.parts[mb][k]
            out = part.output if part.output is not None else self._rebuild(mb, k)
            outs = [o for _, o in part.weighted]
            wanted = ([part.input] if part.input.requires_grad else []) + outs
            grads = torch.autograd.grad(out, wanted, grad, retain_graph=True, allow_unused=True) if wanted else []
            part.weighted = [(mod, o, g) for (mod, o), g in zip(part.weighted, grads[len(grads) - len(outs) :])]
            grad = grads[0] if part.input.requires_grad else None
        triples = [t for part in self.parts[mb] for t in part.weighted]
        self.outputs[mb] = [(mod, o) for mod, o, _ in triples]  # Stage.backward_weight reads these
        self.output_grads[mb] = [g for _, _, g in triples]
        return None if self.is_first else grad

    def _hold(self, mb: int, nbytes: int) -> None:
        self.held.add(nbytes)
        self._rebuilt[mb] = self._rebuilt.get(mb, 0) + nbytes
        self._mine += nbytes
        self.backward_peak = max(self.backward_peak, self._mine)

    def _release(self, mb: int) -> None:
        super()._release(mb)
        self.held.add(-self._rebuilt.pop(mb, 0))  # what a split backward's rebuilds kept until W
        self.parts.pop(mb, None)
        self.targets.pop(mb, None)


def _random_state(device: torch.device) -> tuple:
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_random_state(state: tuple, device: torch.device) -> None:
    cpu, gpu = state
    torch.set_rng_state(cpu)
    if gpu is not None:
        torch.cuda.set_rng_state(gpu, device)
