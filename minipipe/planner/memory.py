"""What each GPU of a layout holds, by kind: the planner's memory model."""
from __future__ import annotations

from typing import Sequence

from ..schedule import kinds
from ..schedule import recompute as recomputation
from .layout import Layout
from .shapes import (ModelShape, bytes_per_parameter, count, embedding_activation_bytes, embedding_tensors,
                     head_activation_bytes, head_tensors, layer_activation_parts, layer_tensors, stage_layers)


def memory_per_rank(model: ModelShape, layout: Layout, precision: str = "bf16-mixed", optimizer: str = "adam", *,
                    sequence_parallel: bool = True, distributed_optimizer: bool = False,
                    vocab_parallel: bool = True, ranks: Sequence[int] | None = None) -> list[dict[str, float]]:
    """Bytes each pipeline rank's GPU holds (or those of `ranks`), by kind (shapes.KINDS), for one
    tp shard.

    parameters, gradients, optimizer: the rank's parameter elements (its blocks, the embedding on
    the first rank, the final norm and head on the last) × shapes.bytes_per_parameter; Adam also
    keeps a 4-byte step count per parameter tensor (torch does). activations: the most micro-batch
    chunks the schedule has the rank hold at once (kinds' peak_inflight) × its largest chunk's
    blocks × what a block keeps under the layout's recomputation, plus the embedding's and the
    head's own (per micro-batch in flight), plus what recomputing one block brings back for the
    span of its backward (minipipe/schedule/recompute.py).
    """
    per = bytes_per_parameter(precision, optimizer)
    tp, p, v = layout.tp, layout.pp, layout.v
    counts = stage_layers(model.layers, p * v)
    block, block_tensors = count(layer_tensors(model), tp)
    emb = count(embedding_tensors(model, vocab_parallel), tp)
    head = count(head_tensors(model, vocab_parallel, p), tp)
    b = layout.micro_batch
    option = recomputation.get(layout.recompute)
    parts = layer_activation_parts(model, b, precision, tp, sequence_parallel=sequence_parallel)
    per_layer, transient = option.kept(parts), option.transient(parts)
    out = []
    for r in range(p) if ranks is None else ranks:
        mine = counts[r::p]
        elements = sum(mine) * block + (emb[0] if r == 0 else 0) + (head[0] if r == p - 1 else 0)
        tensors = sum(mine) * block_tensors + (emb[1] if r == 0 else 0) + (head[1] if r == p - 1 else 0)
        chunks = kinds.get(layout.schedule).peak_inflight(p, layout.m, v, r)
        held = -(-chunks // v)                      # micro-batches that chunk 0 (or the last chunk) holds
        act = chunks * max(mine) * per_layer + transient
        if r == 0:
            act += held * embedding_activation_bytes(model, b)
        if r == p - 1:
            act += held * head_activation_bytes(model, b, precision, tp, sequence_parallel=sequence_parallel,
                                                vocab_parallel=vocab_parallel)
        state = elements * per.optimizer / (layout.dp if distributed_optimizer else 1)
        out.append({"parameters": elements * per.parameters, "gradients": elements * per.gradients,
                    "optimizer": state + (4 * tensors if optimizer == "adam" else 0), "activations": act})
    return out
