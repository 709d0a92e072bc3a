"""One pipeline stage on one rank: a contiguous chunk of the model's layers.

forward(mb, x) keeps what backward will need (the input and the output of this micro-batch);
backward(mb, grad) runs autograd from that output and returns the gradient of the input, which
the previous stage needs. Saved tensors are dropped as soon as their backward ran, so the
memory a schedule needs is exactly what it keeps in flight.

The last stage computes the loss. Each micro-batch's loss is divided by m, so that summing
gradients over the m micro-batches gives the gradient of the full batch's mean loss — the same
number the unsplit model computes in one go.

Split backward (zero-bubble schedules): I computes only the input gradient, W only the weight
gradients, and together they cost what one backward (B) costs. For that, forward keeps the output
of every module that owns weights (each Linear, LayerNorm, Embedding), B asks autograd for the
gradients of those outputs on its way to the input (they lie on that path anyway), and W runs
each such module's own small backward, from its output gradient to its weights: no second
walk down the stage. The price: those outputs and their gradients are kept from I until W.
A stage built with `split_backward` runs both forms: one schedule may mix B with I and W.

Serving (serve/) calls `infer(x)` instead: forward only, under torch.inference_mode, nothing kept.

Under a schedule without a flush (PipeDream, PipeDream-2BW) the stage's `weights` (weight_stash.py)
give each forward the weight version the schedule says it uses, and take each backward's gradients
into the update they belong to.

The bytes a rank holds at once are counted in one `HeldBytes` its stages share: each micro-batch's
activations from the end of its forward until its backward is done. Activation recomputation
(recomputing_stage.py) builds its stages on this one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class Stage:
    def __init__(
        self,
        index: int,
        module: nn.Module,
        n_stages: int,
        n_microbatches: int,
        loss_fn: Callable | None = None,
        split_backward: bool = False,
        held: HeldBytes | None = None,
    ):
        self.index = index
        self.module = module
        self.is_first = index == 0
        self.is_last = index == n_stages - 1
        self.m = n_microbatches
        self.loss_fn = loss_fn
        self.saved: dict[int, tuple] = {}  # mb -> (input, output or loss)
        self.kept_outputs = False  # this micro-batch's forward kept the weighted modules' outputs
        self.split = split_backward
        self.outputs: dict[int, list] = {}  # mb -> (module, output) of each weighted module (split)
        self.output_grads: dict[int, list] = {}  # mb -> their gradients, from B, waiting for W
        self._capture: list | None = None
        if split_backward:
            for mod in module.modules():
                if any(True for _ in mod.parameters(recurse=False)):
                    mod.register_forward_hook(self._keep_output)
        self.losses: dict[int, torch.Tensor] = {}  # read once per step: .item() would sync a GPU per micro-batch
        self.peak_held = 0  # most micro-batches held at once
        self.bytes_per_microbatch: int | None = None  # activations autograd keeps for one backward
        self.held = held if held is not None else HeldBytes()  # the rank's bytes held at once
        self._param_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
        self.weights = None  # a WeightStash, under a schedule without a flush

    def forward(self, mb: int, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor | None:
        """Run one micro-batch; returns the activation for the next stage (None on the last)."""
        if not self.is_first:
            x = x.detach().requires_grad_(True)  # a leaf, so backward stops here and fills x.grad
        if self.bytes_per_microbatch is None:  # every micro-batch has the same shapes: count once
            counter = SavedBytes(self._param_storages)
            with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
                out = self._run(mb, x, target)
            self.bytes_per_microbatch = counter.total
        else:
            out = self._run(mb, x, target)  # no hooks: they cost ~5 % of a small stage's time
        self.saved[mb] = (x, out)
        self.held.add(self.bytes_per_microbatch)
        self.peak_held = max(self.peak_held, len(self.saved))
        if self.is_last:
            self.losses[mb] = out.detach()
            return None
        return out.detach()

    def infer(self, x: torch.Tensor) -> torch.Tensor:
        """Forward only (serving): run the layers under torch.inference_mode, which records no
        graph, and keep nothing. Returns the output, on the last stage too: the model's output,
        where training would compute the loss."""
        with torch.inference_mode():
            return self.module(x)

    def _run(self, mb, x, target):
        if self.split:
            self._capture = self.outputs[mb] = []
        try:
            out = (self.module if self.weights is None else self.weights.module_for(mb))(x)
        finally:
            self._capture = None
        return self.loss_fn(out, target) / self.m if self.is_last else out

    def _keep_output(self, module, args, output):
        if self._capture is not None:
            self._capture.append((module, output))

    def backward(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """B: the whole backward of one micro-batch; returns the gradient w.r.t. this stage's
        input (None on the first stage), which the previous stage needs."""
        x, out = self.saved[mb]
        torch.autograd.backward(out, grad)
        if self.weights is not None:
            self.weights.backward_done(mb)
        self.outputs.pop(mb, None)
        self._release(mb)
        return None if self.is_first else x.grad

    def backward_input(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """I: only the gradient w.r.t. this stage's input, now; the weight gradients wait for
        `backward_weight(mb)`."""
        if not self.split:
            raise RuntimeError(f"stage {self.index} was built without split_backward; an I/W backward needs it")
        x, out = self.saved[mb]
        outs = [o for _, o in self.outputs[mb]]
        wanted = outs if self.is_first else [x, *outs]  # the first stage's input needs no gradient
        grads = torch.autograd.grad(out, wanted, grad, retain_graph=True, allow_unused=True) if wanted else []
        self.output_grads[mb] = list(grads[len(grads) - len(outs) :])
        return None if self.is_first else grads[0]

    def backward_weight(self, mb: int) -> None:
        """W: the weight-gradient half of a split backward, each weighted module on its own, the
        last first (as a full backward finishes them), so data parallelism's first buckets, which
        hold the last layers, can start their all-reduce early (parallel/data.py)."""
        pairs = list(zip(self.outputs.pop(mb), self.output_grads.pop(mb)))
        for (module, output), grad in reversed(pairs):
            params = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if params and grad is not None:
                torch.autograd.backward(output, grad, inputs=params, retain_graph=True)
        self._release(mb)

    def step_loss(self) -> float | None:
        """The sum of this step's micro-batch losses (each already divided by m): the batch's
        mean loss. One host sync per step."""
        return torch.stack(list(self.losses.values())).sum().item() if self.losses else None

    def step_losses(self, per_step: int, per_update: int) -> list[float]:
        """A schedule of several steps: each step's mean loss over its per_step micro-batches (each
        kept divided by per_update, the micro-batches of one update)."""
        each = torch.stack([self.losses[mb] for mb in sorted(self.losses)]).view(-1, per_step)
        return (each.sum(1) * (per_update / per_step)).tolist()

    @property
    def peak_bytes(self) -> int:
        return self.peak_held * (self.bytes_per_microbatch or 0)

    def _release(self, mb: int) -> None:
        del self.saved[mb]
        self.held.add(-(self.bytes_per_microbatch or 0))

    def reset_step(self) -> None:
        if self.saved:
            raise RuntimeError(
                f"stage {self.index} still holds micro-batches {sorted(self.saved)} at the end of a step"
            )
        self.losses.clear()


class HeldBytes:
    """The activation bytes one rank holds now, and the most it held at once: its stages add a
    micro-batch's bytes when they keep them and take them off when they free them."""

    def __init__(self):
        self.now = self.peak = 0

    def add(self, nbytes: int) -> None:
        self.now += nbytes
        self.peak = max(self.peak, self.now)


class SavedBytes:
    """Counts the bytes of activations autograd keeps for backward (each tensor once, however
    often it is saved; a view counts its own bytes, not all of its storage — the first stage's
    micro-batch is a view of the whole batch; the weights it also keeps are the model's, not the
    micro-batch's, so they don't count)."""

    def __init__(self, parameters: set[int]):
        self.total = 0
        self._params = set(parameters)
        self._seen: set[tuple[int, int, int]] = set()

    def pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.storage_offset(), t.numel())
        if storage.data_ptr() not in self._params and key not in self._seen:
            self._seen.add(key)
            self.total += min(storage.nbytes(), t.numel() * t.element_size())
        return t

    def counted(self, t: torch.Tensor) -> SavedBytes:
        """Take `t` as already counted elsewhere (it will not add to this count)."""
        before = self.total
        self.pack(t)
        self.total = before
        return self

    @staticmethod
    def unpack(t):
        return t
