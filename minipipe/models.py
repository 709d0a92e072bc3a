"""Small models for the course, as flat lists of layers so a pipeline can cut them anywhere,
with synthetic tasks that are generated in code (nothing is downloaded).

A `Task` bundles a model, its data and its loss:

    task = make_task("gpt", depth=4)
    layers = task.layers()            # list[nn.Module], the same weights for the same seed
    x, y = task.batch(step=0)         # the global batch of step 0, the same on every process
    loss = task.loss(model_output, y) # mean over the batch

Every process can build the same batch and the same initial weights from the seed alone, so
ranks exchange activations and gradients, never data or parameters.

Both course models say `depth` for their number of repeated blocks; `n_layers` is the length of
the layer list a pipeline cuts (the blocks plus an embedding or a readout). Your own model goes
through the same door: `make_task("mypackage.mymodule:make_net")` or `make_task(MyNet)`, see
custom.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


# -- MLP stack ------------------------------------------------------------------------------
class ResidualLinear(nn.Module):
    """x + relu(W x + b): one Linear of work per layer; the residual keeps a deep stack trainable."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + F.relu(self.linear(x))


class Readout(nn.Module):
    """Normalise, then project to the outputs (the MLP's targets, the GPT's vocabulary)."""

    def __init__(self, width: int, out: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, out)

    def forward(self, x):
        return self.linear(self.norm(x))


# -- tiny GPT -------------------------------------------------------------------------------
class Embedding(nn.Module):
    def __init__(self, vocab: int, block: int, width: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block, width)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.tok(idx) + self.pos(positions)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


# -- tasks ----------------------------------------------------------------------------------
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
        return ([Embedding(self.vocab, self.block, self.width)]
                + [Block(self.width, self.heads) for _ in range(self.depth)]
                + [Readout(self.width, self.vocab)])

    def _data(self, gen):
        start = torch.randint(0, self.vocab, (self.batch_size, 1), generator=gen)
        step = torch.randint(1, 8, (self.batch_size, 1), generator=gen)
        seq = (start + step * torch.arange(self.block + 1)) % self.vocab
        return seq[:, :-1], seq[:, 1:]

    def loss(self, output, target):
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


TASKS = {"mlp": MLPTask, "gpt": GPTTask}


def task_of(run) -> Task:
    """The task of a run: anything with `model`, `batch_size`, `seed` and `model_args` (a RunConfig)."""
    return make_task(run.model, batch_size=run.batch_size, seed=run.seed, **run.model_args)


def make_task(model="mlp", batch_size: int = 32, seed: int = 0, **model_args) -> Task:
    """`make_task("mlp", width=64, depth=8)`, `make_task("gpt", depth=4, width=32)`, or your own
    model: `make_task("mypackage.mymodule:make_net", width=64)` or `make_task(MyNet)` (custom.py)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    if not (isinstance(model, str) and model in TASKS):
        from .custom import custom_task

        return custom_task(model, batch_size, seed, model_args)
    cls = TASKS[model]
    fields = set(cls.__dataclass_fields__) - {"name", "batch_size", "seed"}
    unknown = set(model_args) - fields
    if unknown:
        raise ValueError(f"model {model!r} has no setting {', '.join(sorted(unknown))}; its settings are {', '.join(sorted(fields))}")
    for key, value in model_args.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"model setting {key} must be a whole number >= 1, got {value!r}")
    if model == "gpt" and model_args.get("width", 32) % model_args.get("heads", 2):
        raise ValueError(f"gpt width must be a multiple of heads, got width={model_args.get('width', 32)}, "
                         f"heads={model_args.get('heads', 2)}")
    return cls(name=model, batch_size=batch_size, seed=seed, **model_args)
