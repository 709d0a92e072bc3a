"""Context parallelism in the open: every sequence split across the cp ranks of a group.

A rank of a cp group holds a share of every sequence of its batch, the same weights as the
others, and computes everything token by token on its share alone, but for attention, which goes
round a ring of its group (ring_attention.py). Its gradients are those of its tokens' loss, so the
cp ranks average their gradients as data-parallel replicas do (over dp × cp: mesh.py's dp_cp).

The split is the zig-zag one (Megatron-Core's "load-balanced" context parallelism; torchtitan's
`context_parallel` with its load balancer on): the sequence is cut into 2·cp equal chunks and rank
r takes chunks r and 2cp − 1 − r, an early one and a late one. Under the causal mask a late query
attends to many keys and an early one to few, so the halves of every rank's work even out: cut into
cp plain pieces instead, the last rank would do cp times the work of the first at every step
(Liu et al. 2023 leave the mask's balance aside; Brandon et al. 2023, "Striped Attention", stripe
the tokens for it; Megatron-Core and torchtitan cut in 2·cp).

What a layer needs to run on a share of the sequence, its layer type declares (as a tensor-parallel
form is declared, parallel/tensor.py):

    register_cp_form(T, form, kv_bytes=None)
                                 form(layer, cp, positions) makes a layer of type T work on this
                                 rank's tokens (the course's Block: ring attention; Embedding: the
                                 tokens' own positions), beside the layer's definition; a layer
                                 with ring attention says with kv_bytes(layer, input shape, element
                                 size, tp) what its K and V blocks weigh, for the byte formulas
    register_tokenwise(T)        T works token by token (a LayerNorm, a Linear, the readout):
                                 it runs on a share unchanged

A model with a layer of neither kind is refused before any process starts (its layer would see
only a share of the sequence and compute something else, silently), and so is one with no form at
all (an MLP on vectors has no sequence to split).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..traffic import TrafficKind, ring_attention_steps
from .ring_attention import CPGroup

Form = Callable[[nn.Module, CPGroup, torch.Tensor], nn.Module]
KVBytes = Callable[[nn.Module, tuple, int, int], int]
FORMS: dict[type, Form] = {}  # exact types: a subclass may compute something else
KV_BYTES: dict[type, KVBytes] = {}
TOKENWISE: set[type] = set()


def register_cp_form(layer_type: type, form: Form, kv_bytes: KVBytes | None = None) -> None:
    """Run layers of exactly `layer_type` on a share of the sequence with `form(layer, cp, positions)`
    (`positions`: the global positions of this rank's tokens, in order). `kv_bytes(layer, input
    shape, element size, tp)`: for a layer with ring attention, the bytes of this rank's K and V
    blocks for one micro-batch whose input (this rank's share) has that shape."""
    if not callable(form) or (kv_bytes is not None and not callable(kv_bytes)):
        raise ValueError(
            f"a context-parallel form is a function form(layer, cp, positions) (and kv_bytes one of "
            f"(layer, input shape, element size, tp)), got {form!r}, {kv_bytes!r}"
        )
    FORMS[layer_type] = form
    if kv_bytes is not None:
        KV_BYTES[layer_type] = kv_bytes


def register_tokenwise(layer_type: type) -> None:
    """Layers of exactly `layer_type` work token by token: they run on a share of the sequence as they are."""
    TOKENWISE.add(layer_type)


# -- the zig-zag split ------------------------------------------------------------------------
def zigzag_chunks(cp: int, rank: int) -> tuple[int, int]:
    """The two of the 2·cp chunks of a sequence that cp rank `rank` holds, in order."""
    if not 0 <= rank < cp:
        raise ValueError(f"cp rank must be in 0..{cp - 1}, got {rank}")
    return rank, 2 * cp - 1 - rank


def zigzag_positions(seq: int, cp: int, rank: int) -> torch.Tensor:
    """The positions in a sequence of `seq` tokens of the ones cp rank `rank` holds, in order."""
    check_sequence(seq, cp)
    n = seq // (2 * cp)
    return torch.cat([torch.arange(c * n, (c + 1) * n) for c in zigzag_chunks(cp, rank)])


def shard_sequence(t: torch.Tensor, cp: int, rank: int, dim: int = 1) -> torch.Tensor:
    """This rank's share of `t` along its sequence dimension `dim` (data, targets, activations)."""
    if cp == 1:
        return t
    return t.index_select(dim, zigzag_positions(t.shape[dim], cp, rank).to(t.device))


def unshard_sequence(shares: list[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The whole of a tensor from every cp rank's share, in rank order (shard_sequence's inverse)."""
    cp = len(shares)
    seq = sum(s.shape[dim] for s in shares)
    order = torch.cat([zigzag_positions(seq, cp, r) for r in range(cp)])
    whole = torch.cat(shares, dim=dim)
    return whole.index_select(dim, torch.argsort(order).to(whole.device))


# -- layers on a share ------------------------------------------------------------------------
def context_parallel(layer: nn.Module, cp: CPGroup, positions: torch.Tensor) -> nn.Module:
    """`layer` made to run on this rank's tokens (`positions`: theirs in the sequence): its
    context-parallel form, or the layer itself if it works token by token (or cp is 1)."""
    if cp.size == 1 or type(layer) in TOKENWISE:
        return layer
    if type(layer) not in FORMS:
        raise ValueError(f"{type(layer).__name__} has no context-parallel form (check_context_parallel refuses it)")
    return FORMS[type(layer)](layer, cp, positions)


def ring_steps(layer: nn.Module, input_shape, dtype, tp: int, cp: int, phase: str) -> list[tuple[TrafficKind, float]]:
    """The ring attention steps one micro-batch through `layer` (a full layer; its input, this
    rank's share, of `input_shape`) runs in `phase` on each cp rank: (CP_RING, bytes sent) each,
    traffic.ring_attention_steps's rule. Empty for a layer without ring attention, or cp = 1."""
    if cp == 1 or type(layer) not in KV_BYTES:
        return []
    kv = KV_BYTES[type(layer)](layer, tuple(input_shape), torch.empty((), dtype=dtype).element_size(), tp)
    return [(TrafficKind.CP_RING, nbytes) for nbytes in ring_attention_steps(phase, kv, cp)]


def check_sequence(seq: int, cp: int) -> None:
    if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
        raise ValueError(f"cp must be a whole number >= 1 (the number of context-parallel ranks), got {cp!r}")
    if seq % (2 * cp):
        ok = [d for d in range(1, seq // 2 + 1) if seq % (2 * d) == 0]
        raise ValueError(
            f"cp={cp} must cut the sequence of {seq} tokens into 2·cp = {2 * cp} equal chunks (each "
            f"rank holds an early and a late one, which balances the causal mask); choose cp from "
            f"{', '.join(map(str, ok))}, or a sequence length that 2·cp divides"
        )


def check_context_parallel(layers: list[nn.Module], cp: int, sample: torch.Tensor) -> None:
    """Can this model (a list of full layers, fed batches like `sample`) run with `cp`
    context-parallel ranks? A ValueError that says what would work if not."""
    if cp == 1:
        return
    kinds = sorted({type(layer).__name__ for layer in layers})
    if not any(type(layer) in FORMS for layer in layers):
        raise ValueError(
            f"cp={cp} splits each sequence across ranks, but this model has no sequence to split: "
            f"none of its layers ({', '.join(kinds)}) has a context-parallel form "
            f"({', '.join(t.__name__ for t in FORMS)}); use cp=1, or a model with attention "
            f"(model='gpt')"
        )
    unknown = sorted(
        {type(layer).__name__ for layer in layers if type(layer) not in FORMS and type(layer) not in TOKENWISE}
    )
    if unknown:
        raise ValueError(
            f"cp={cp} runs every layer on a share of each sequence, and {', '.join(unknown)} "
            f"{'has' if len(unknown) == 1 else 'have'} neither a context-parallel form nor the "
            f"word that {'it works' if len(unknown) == 1 else 'they work'} token by token; declare "
            f"one (minipipe.parallel.context.register_cp_form or register_tokenwise), or use cp=1"
        )
    if sample.dim() < 2:
        raise ValueError(
            f"cp={cp} splits the sequence, the second dimension of the data, but a batch here is "
            f"{tuple(sample.shape)}; use cp=1"
        )
    check_sequence(sample.shape[1], cp)
