"""The course models' layers: a residual MLP layer, a readout, and a tiny GPT's embedding and block.

Each is an ordinary nn.Module; a model is a flat list of them (models/course.py), so a pipeline can
cut between any two.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
