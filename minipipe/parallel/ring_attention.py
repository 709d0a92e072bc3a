"""Ring attention: causal self-attention over a sequence split across the cp ranks of a group.

Context parallelism gives each of cp ranks a share of every sequence. Everything in a transformer
but attention works token by token, so a rank computes it on its own tokens alone; attention needs
every earlier token's key and value. Ring attention (Liu, Zaharia & Abbeel 2023, "Ring Attention
with Blockwise Transformers for Near-Infinite Context"; Megatron-Core's context parallelism and
torchtitan's are the same ring) keeps each rank's queries where they are and passes the keys and
values round a ring: at step s, rank r holds the K and V block of rank r − s, attends its queries
to it, and hands it on to rank r + 1. After cp − 1 steps every query has met every block.

Blocks are merged exactly with the online softmax (Milakov & Gimelshein 2018; FlashAttention):
each block's output comes with the log-sum-exp of its scores per query, and two partial results
combine as

    lse = log(exp(lse₁) + exp(lse₂)),   out = out₁·exp(lse₁ − lse) + out₂·exp(lse₂ − lse)

which is softmax over the union of the keys: the same numbers as attention over the whole
sequence up to float rounding. The backward is FlashAttention's from the saved output and lse,
block by block: with P = exp(S − lse) and D = rowsum(dO ∘ O), dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − D),
dQ = dS K, dK = dSᵀ Q (each scaled by 1/√d). The K and V blocks go round the ring again, and the
dK and dV accumulated on each travel with it, one more step home to their owner at the end.

Causal masking is balanced as the field balances it (zig-zag, Megatron-Core's and torchtitan's
"load-balanced" sharding; context.py cuts the sequence): the sequence is cut into 2·cp chunks and
rank r holds chunks r and 2cp − 1 − r, so its tokens, in order, are an early chunk and a late one.
Then at every step but the first a rank does the same work, half a full block:

    step 0, its own block     causal within its 2 chunks (their positions are in order)
    block of a rank j < r     all its queries, against chunk j only (chunk 2cp−1−j is later than both)
    block of a rank j > r     its late chunk's queries only, against both chunks (its early chunk is
                              earlier than both)

`pass_on` is the one door every step goes through: it sends to the next rank, receives from the
one before, and tells the group's hook the bytes sent and when (traffic.py's CP_RING; what each
step sends is traffic.ring_attention_steps). Steps are exchanged, then computed: on gloo the
exchange and the compute share the CPU cores, so they are not overlapped (the field posts the next
block's transfer before computing the current one; the planner prices that overlap on GPUs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..traffic import TrafficKind
from .errors import collective_failed

Hook = Callable[[TrafficKind, int, float, float], None]  # (kind, bytes sent, start, end), perf_counter times


@dataclass
class CPGroup:
    """Where one rank's ring attention talks: the torch group (its cp group), this rank's place
    in it, a hook told about each ring step, and the group's timeout in seconds, if known."""

    group: object
    rank: int
    size: int
    hook: Hook | None = None
    timeout: float | None = None

    def __repr__(self):
        return f"CPGroup(rank={self.rank}, size={self.size})"


# -- one block of attention, and the merge ----------------------------------------------------
def block_scores(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Scaled scores q kᵀ/√d; `causal`: query i sees key j only for j <= i (both in order)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        later = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(later, float("-inf"))
    return scores


def block_forward(q, k, v, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of q to one block of keys and values: (output, log-sum-exp of the scores per query)."""
    scores = block_scores(q, k, causal)
    lse = torch.logsumexp(scores, dim=-1)
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


def merge(out, lse, block_out, block_lse) -> tuple[torch.Tensor, torch.Tensor]:
    """Two partial attentions of the same queries to different keys, combined exactly."""
    both = torch.logaddexp(lse, block_lse)
    return out * torch.exp(lse - both).unsqueeze(-1) + block_out * torch.exp(block_lse - both).unsqueeze(-1), both


def block_backward(q, k, v, d_out, lse, delta, causal: bool):
    """FlashAttention's backward for one block, from the whole attention's lse and
    delta = rowsum(d_out ∘ out): this block's share of dq, and its dk, dv."""
    p = torch.exp(block_scores(q, k, causal) - lse.unsqueeze(-1))
    scale = 1.0 / math.sqrt(q.shape[-1])
    d_scores = p * (d_out @ v.transpose(-2, -1) - delta.unsqueeze(-1)) * scale
    return d_scores @ k, d_scores.transpose(-2, -1) @ q, p.transpose(-2, -1) @ d_out


def step_block(step: int, rank: int, size: int, half: int) -> tuple[slice, slice, bool]:
    """Which of this rank's queries meet which keys of the block it holds at ring `step`, and
    whether causally (see the module docstring): (query rows, key columns, causal)."""
    every = slice(None)
    if step == 0:
        return every, every, True
    if (rank - step) % size < rank:  # an earlier rank's block: its early chunk only
        return every, slice(0, half), False
    return slice(half, None), every, False  # a later rank's block: my late chunk only


# -- the ring ---------------------------------------------------------------------------------
def pass_on(tensor: torch.Tensor, cp: CPGroup) -> torch.Tensor:
    """One ring step: send `tensor` to the next rank, return what the one before sent."""
    send = tensor.contiguous()
    received = torch.empty_like(send)
    start, started = time.perf_counter(), time.monotonic()
    try:
        works = dist.batch_isend_irecv(
            [
                dist.P2POp(dist.isend, send, group=cp.group, group_peer=(cp.rank + 1) % cp.size),
                dist.P2POp(dist.irecv, received, group=cp.group, group_peer=(cp.rank - 1) % cp.size),
            ]
        )
        for work in works:
            work.wait()
    except RuntimeError as e:  # a peer hung or died: say so in minipipe's words
        raise collective_failed("a ring attention step", cp.group, e, started, cp.timeout) from None
    if cp.hook is not None:
        cp.hook(TrafficKind.CP_RING, send.numel() * send.element_size(), start, time.perf_counter())
    return received


class RingAttention(torch.autograd.Function):
    """Causal attention of this rank's queries to every rank's keys and values, by the ring.
    q, k, v: [b, heads, 2·chunk, head size], the rank's two zig-zag chunks in order."""

    @staticmethod
    def forward(ctx, q, k, v, cp: CPGroup):
        half = q.shape[-2] // 2
        out, lse = block_forward(q, k, v, causal=True)
        kv = torch.stack([k, v])
        for step in range(1, cp.size):
            kv = pass_on(kv, cp)
            rows, cols, causal = step_block(step, cp.rank, cp.size, half)
            part = block_forward(q[..., rows, :], kv[0][..., cols, :], kv[1][..., cols, :], causal)
            out[..., rows, :], lse[..., rows] = merge(out[..., rows, :], lse[..., rows], *part)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp = cp
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        cp, half = ctx.cp, q.shape[-2] // 2
        d_out = d_out.contiguous()
        delta = (d_out * out).sum(-1)
        dq, dk, dv = block_backward(q, k, v, d_out, lse, delta, causal=True)
        kv, acc = torch.stack([k, v]), torch.stack([dk, dv])  # acc: the gradient of the block kv holds
        for step in range(1, cp.size):
            both = pass_on(torch.cat([kv, acc]), cp)
            kv, acc = both[:2], both[2:]
            rows, cols, causal = step_block(step, cp.rank, cp.size, half)
            d = block_backward(
                q[..., rows, :],
                kv[0][..., cols, :],
                kv[1][..., cols, :],
                d_out[..., rows, :],
                lse[..., rows],
                delta[..., rows],
                causal,
            )
            dq[..., rows, :] += d[0]
            acc[0][..., cols, :] += d[1]
            acc[1][..., cols, :] += d[2]
        if cp.size > 1:
            acc = pass_on(acc, cp)  # home: the gradient of this rank's own k and v
        return dq, acc[0], acc[1], None


class RingCausalAttention:
    """A Block's attention (models/layers.py: `block.attend`) made ring attention over `cp`."""

    def __init__(self, cp: CPGroup):
        self.cp = cp

    def __call__(self, q, k, v):
        if q.shape[-2] % 2:
            raise ValueError(
                f"ring attention needs each rank's two zig-zag chunks, an even number of tokens; got {q.shape[-2]}"
            )
        return RingAttention.apply(q, k, v, self.cp)

    def __repr__(self):
        return f"RingCausalAttention({self.cp!r})"
