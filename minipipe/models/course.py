"""The course's models, with synthetic tasks generated in code (nothing is downloaded): an MLP
stack regressing onto a random teacher, a tiny GPT predicting arithmetic progressions, and the
same GPT with mixture-of-experts blocks (moe.py).

Both say `depth` for their number of repeated blocks; `n_layers` is the length of the layer list a
pipeline cuts (the blocks plus an embedding or a readout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from .layers import Block, Embedding, Readout, ResidualLinear
from .moe import MoEBlock
from .task import Task


@dataclass
class MLPTask(Task):
    """Regression onto a fixed random 'teacher': y = tanh(x A) with x ~ N(0, 1)."""

    width: int = 64
    depth: int = 8

    @property
    def n_layers(self) -> int:
        return self.depth + 1

    def _build(self):
        return [ResidualLinear(self.width) for _ in range(self.depth)] + [Readout(self.width, self.width)]

    def _data(self, gen):
        teacher = torch.Generator().manual_seed(self.seed + 7)
        a = torch.randn(self.width, self.width, generator=teacher) / math.sqrt(self.width)
        x = torch.randn(self.batch_size, self.width, generator=gen)
        return x, torch.tanh(2.0 * x @ a)

    def loss(self, output, target):
        return F.mse_loss(output, target)


@dataclass
class GPTTask(Task):
    """Next-token prediction on arithmetic progressions mod `vocab` (a, a+d, a+2d, ...): the
    model must read the step d from the context, so the loss falls from ln(vocab) towards 0."""

    vocab: int = 32
    block: int = 16
    width: int = 32
    heads: int = 2
    depth: int = 4

    @property
    def n_layers(self) -> int:
        return self.depth + 2

    def _build(self):
        return (
            [Embedding(self.vocab, self.block, self.width)]
            + [Block(self.width, self.heads) for _ in range(self.depth)]
            + [Readout(self.width, self.vocab)]
        )

    def _data(self, gen):
        start = torch.randint(0, self.vocab, (self.batch_size, 1), generator=gen)
        step = torch.randint(1, 8, (self.batch_size, 1), generator=gen)
        seq = (start + step * torch.arange(self.block + 1)) % self.vocab
        return seq[:, :-1], seq[:, 1:]

    def loss(self, output, target):
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


@dataclass
class MoETask(GPTTask):
    """The GPT with every `moe_every`-th block's MLP a mixture of `experts` experts (moe.py): every
    second one by default, as Switch Transformer and GShard place them; moe_every=1 makes every
    block one, as Mixtral does. `top_k` experts per token, `capacity_factor` (1.25: Switch's;
    experts/top_k drops nothing), `aux_loss` the load-balancing loss's weight (0: none)."""

    experts: int = 4
    top_k: int = 2
    capacity_factor: float = 1.25
    aux_loss: float = 0.01
    moe_every: int = 2

    FLOAT_ARGS = ("capacity_factor", "aux_loss")

    def is_moe(self, block: int) -> bool:
        return block % self.moe_every == self.moe_every - 1

    def _build(self):
        def block(i):
            if not self.is_moe(i):
                return Block(self.width, self.heads)
            return MoEBlock(self.width, self.heads, self.experts, self.top_k, self.capacity_factor, self.aux_loss)

        return (
            [Embedding(self.vocab, self.block, self.width)]
            + [block(i) for i in range(self.depth)]
            + [Readout(self.width, self.vocab)]
        )


TASKS = {"mlp": MLPTask, "gpt": GPTTask, "moe": MoETask}
