"""What a model is to minipipe: a `Task` bundles the layers, the data and the loss.

    layers = task.layers()            # list[nn.Module], the same weights for the same seed
    x, y = task.batch(step=0)         # the global batch of step 0, the same on every process
    loss = task.loss(model_output, y) # mean over the batch

Every process can build the same batch and the same initial weights from the seed alone, so
ranks exchange activations and gradients, never data or parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


def seeded(seed: int, build):
    """`build()` with torch's random generator seeded to `seed`, the caller's generator left as it
    was: every process that builds a task's layers this way gets the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


@dataclass
class Task:
    name: str
    batch_size: int
    seed: int

    @property
    def n_layers(self) -> int:
        raise NotImplementedError

    def _build(self) -> list[nn.Module]:
        raise NotImplementedError

    def _data(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def layers(self) -> list[nn.Module]:
        """The model as a list of layers, initialised from the seed (the same in every process)."""
        return seeded(self.seed, self._build)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The global batch of `step`: inputs and targets, a pure function of (seed, step)."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 1)
        return self._data(gen)

    def describe(self) -> str:
        params = sum(p.numel() for layer in self.layers() for p in layer.parameters())
        return f"{self.name}: {self.n_layers} layers, {params:,} parameters, batch {self.batch_size}"
