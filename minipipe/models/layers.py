"""The course models' layers: a residual MLP layer, a readout, and a tiny GPT's embedding and block.

Each is an ordinary nn.Module; a model is a flat list of them (models/course.py), so a pipeline can
cut between any two. The two layers that tensor parallelism splits have their tensor-parallel form
beside them, built from parallel/tensor.py's pieces and registered there; the embedding and the
readout stay whole on every tp rank. For context parallelism (parallel/context.py) the block's
attention becomes ring attention and the embedding reads its tokens' own positions; the readout
and the MLP's layers work token by token.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ..parallel.context import register_cp_form, register_tokenwise
from ..parallel.ring_attention import RingCausalAttention
from ..parallel.tensor import (
    Collective,
    ColumnParallelLinear,
    GatherFromTP,
    RowParallelLinear,
    Shard,
    TensorParallelForm,
    TPGroup,
    register_form,
)
from ..traffic import TrafficKind


class ResidualLinear(nn.Module):
    """x + relu(W x + b): one Linear of work per layer; the residual keeps a deep stack trainable."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + F.relu(self.linear(x))


class TensorParallelResidualLinear(TensorParallelForm):
    """x + relu(W x + b) with W's output features split: column-parallel, then the ranks' slices
    of relu(...) all-gathered, since the residual needs the whole output on every rank.

    A single Linear has no partner to pair column with row, so per layer and micro-batch of
    activations [..., width] it costs one all-gather of [..., width] in forward and one all-reduce
    of [..., width] (f's, the input gradient) in backward: the bytes a Megatron MLP sub-block
    moves, for half the matmuls. (Row-parallel from the replicated input costs the same, with the
    all-reduce in forward and an all-gather in backward.) A stack of single Linears is the layout
    that gives tensor parallelism the least work to spread its talk over."""

    shards = {"linear.weight": Shard(0), "linear.bias": Shard(0)}

    def __init__(self, layer: ResidualLinear, tp: TPGroup):
        super().__init__()
        self.tp = tp
        self.linear = ColumnParallelLinear.from_linear(layer.linear, tp)

    def forward(self, x):
        return x + GatherFromTP.apply(F.relu(self.linear(x)), self.tp)

    @classmethod
    def constraints(cls, layer: ResidualLinear) -> list[tuple[int, str]]:
        return [(layer.linear.out_features, "the MLP's width (each rank keeps width/tp output features)")]

    @classmethod
    def collectives(cls, layer: ResidualLinear, nbytes: int, input_grad: bool) -> list[Collective]:
        # with no gradient wanted for the input, autograd skips f's backward all-reduce
        out = [Collective(TrafficKind.TP_ALL_GATHER, "forward", nbytes)]
        return out + [Collective(TrafficKind.TP_ALL_REDUCE, "backward", nbytes)] * input_grad


register_form(ResidualLinear, TensorParallelResidualLinear)
register_tokenwise(ResidualLinear)


class Readout(nn.Module):
    """Normalise, then project to the outputs (the MLP's targets, the GPT's vocabulary)."""

    def __init__(self, width: int, out: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, out)

    def forward(self, x):
        return self.linear(self.norm(x))


register_tokenwise(Readout)


class Embedding(nn.Module):
    """Token and position embeddings. `positions` (None: 0, 1, 2, ...) are the tokens' places in
    their sequence, set where a rank holds a share of it (context parallelism)."""

    def __init__(self, vocab: int, block: int, width: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block, width)
        self.register_buffer("positions", None, persistent=False)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device) if self.positions is None else self.positions
        return self.tok(idx) + self.pos(positions)


def share_positions(layer: Embedding, cp, positions: torch.Tensor) -> Embedding:
    """An embedding of this rank's share of each sequence: its tokens' own positions (a buffer, so
    that it moves with the stage to its device, left out of the state_dict)."""
    layer.positions = positions.clone()
    return layer


register_cp_form(Embedding, share_positions)


def causal_attention(q, k, v):
    """Causal self-attention of whole sequences: [b, heads, t, head size] each."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


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
        self.attend = causal_attention  # context parallelism puts ring attention here

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.attend(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TensorParallelBlock(TensorParallelForm):
    """A GPT block with heads/tp heads and 4·width/tp MLP features per rank. Attention: f, then
    qkv column-parallel (this rank's heads' columns of each of q, k and v), attention over those
    heads alone (heads never mix), then proj row-parallel (g). MLP: f, fc column-parallel, gelu on
    the slice, out row-parallel (g). One all-reduce of the activation [b, t, width] in forward and
    one in backward per sub-block: four per block."""

    shards = {
        "qkv.weight": Shard(0, 3),
        "qkv.bias": Shard(0, 3),
        "proj.weight": Shard(1),
        "fc.weight": Shard(0),
        "fc.bias": Shard(0),
        "out.weight": Shard(1),
    }

    def __init__(self, block: Block, tp: TPGroup):
        super().__init__()
        self.tp = tp
        self.heads = block.heads // tp.size  # this rank's heads
        self.width = block.qkv.in_features // tp.size  # their channels: heads · head size
        self.ln1 = copy.deepcopy(block.ln1)
        self.qkv = ColumnParallelLinear.from_linear(block.qkv, tp, parts=3)
        self.proj = RowParallelLinear.from_linear(block.proj, tp)
        self.ln2 = copy.deepcopy(block.ln2)
        self.fc = ColumnParallelLinear.from_linear(block.fc, tp)
        self.out = RowParallelLinear.from_linear(block.out, tp)
        self.attend = block.attend

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.width, dim=2)
        q, k, v = (z.view(b, t, self.heads, self.width // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.attend(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, self.width))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    @classmethod
    def constraints(cls, layer: Block) -> list[tuple[int, str]]:
        return [
            (layer.heads, "the GPT block's heads (attention is split by heads)"),
            (layer.qkv.in_features, "the GPT block's width"),
            (layer.fc.out_features, "the GPT block's MLP features (4·width)"),
        ]

    @classmethod
    def collectives(cls, layer: Block, nbytes: int, input_grad: bool) -> list[Collective]:
        # attention's g and the MLP's g; in backward the MLP's f, then attention's. Each f reduces
        # the gradient of a LayerNorm's output, which that LayerNorm's own weights need even when
        # the block's input needs no gradient: both always run.
        return [Collective(TrafficKind.TP_ALL_REDUCE, "forward", nbytes)] * 2 + [
            Collective(TrafficKind.TP_ALL_REDUCE, "backward", nbytes)
        ] * 2


register_form(Block, TensorParallelBlock)


def ring_attention(block: Block | TensorParallelBlock, cp, positions) -> nn.Module:
    """A block on this rank's share of each sequence: its attention goes round the cp ring
    (parallel/ring_attention.py); everything else in it works token by token."""
    block.attend = RingCausalAttention(cp)
    return block


def kv_bytes(block: Block, input_shape: tuple, element_size: int, tp: int) -> int:
    """One rank's K and V for one micro-batch of [b, t, width]: 2 · b · t · width/tp values."""
    b, t, width = input_shape
    return 2 * b * t * (width // tp) * element_size


register_cp_form(Block, ring_attention, kv_bytes)
register_cp_form(TensorParallelBlock, ring_attention)  # built from a Block (tensor_parallel), counted as one
