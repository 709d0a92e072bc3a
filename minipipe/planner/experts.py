"""Mixture-of-experts models by their shape: parameters (all of them, and those one token
uses), the bytes a GPU holds when the experts are split over ep ranks, and the all-to-all each
MoE block runs per micro-batch — its bytes from traffic.moe_exchanges and its time from
sim/network.ring, the rule the engine counts and the mesh simulator replays (one rule, one place).

    from minipipe.planner.experts import MOE_MODELS, moe_parameters
    total, active = moe_parameters(*MOE_MODELS["mixtral-8x7b"])     # 46.7 and 12.9 billion

A MoE model is a `ModelShape` (shapes.py: its attention, norms, embedding and head) with an
`Experts`: every block past the first `dense_layers` replaces its MLP by a router (a Linear
from the width to the experts' scores) and `experts` expert MLPs of `ffn` inner width, `top_k`
of them per token, plus `shared` experts every token uses (DeepSeek's). The experts' MLPs are
shaped as the model's (gated or not); the dense blocks keep the model's own MLP. Attention is
the model's, or DeepSeek-V2's multi-head latent attention (`LatentAttention`) where given.

Memory: the experts are split over ep ranks (borrowed from dp × cp: parallel/mesh.py) and, as
Megatron-Core does by default (expert tensor parallelism = tp), each expert over tp like a
dense MLP. The planner's search (`minipipe plan --ep`) prices a MoE model as its dense
equivalent (setup_and_layout.dense_equivalent) plus what footprint.py and evaluate.py add from
here: the experts beyond one token's path, and `all_to_all`'s time in every MoE block.
"""

from __future__ import annotations

from typing import Any

from ..sim.network import Link, ring
from ..traffic import TrafficKind, moe_exchanges, ring_bytes
from .moe_shape import Experts, LatentAttention
from .presets import MOE_MODELS
from .shapes import VALUE_BYTES, ModelShape, layer_parameters, parameters


def mlp_parameters(shape: ModelShape, ffn: int) -> int:
    return (3 if shape.gated else 2) * shape.hidden * ffn + (
        ffn * (2 if shape.gated else 1) + shape.hidden
    ) * shape.bias


def _attention_and_norms(shape: ModelShape, latent: LatentAttention | None) -> int:
    """A block's parameters but its MLP."""
    whole = layer_parameters(shape) - mlp_parameters(shape, shape.inner)
    if latent is None:
        return whole
    h, a, L = shape.hidden, shape.heads, latent
    norms = (2 if shape.norm == "layernorm" else 1) * h * 2
    mla = (
        h * L.q_rank
        + L.q_rank
        + L.q_rank * a * (L.nope + L.rope)  # q down, its norm, q up
        + h * (L.kv_rank + L.rope)
        + L.kv_rank
        + L.kv_rank * a * (L.nope + L.v)  # kv down, its norm, kv up
        + a * L.v * h
    )  # the output projection
    return norms + mla


def moe_parameters(shape: ModelShape, moe: Experts, latent: LatentAttention | None = None) -> tuple[int, int]:
    """(every parameter, the parameters one token runs through) of the whole model, the head
    counted once when tied."""
    outside = parameters(shape) - shape.layers * layer_parameters(shape)  # embedding, final norm, head
    base = _attention_and_norms(shape, latent)
    router = moe.experts * shape.hidden + moe.experts * moe.router_bias
    expert = mlp_parameters(shape, moe.ffn)
    dense = moe.dense_layers * (base + mlp_parameters(shape, shape.inner))
    sparse = shape.layers - moe.dense_layers
    total = outside + dense + sparse * (base + router + (moe.experts + moe.shared) * expert)
    active = outside + dense + sparse * (base + router + (moe.top_k + moe.shared) * expert)
    return total, active


def expert_parameters_per_gpu(shape: ModelShape, moe: Experts, *, ep: int = 1, tp: int = 1, pp: int = 1) -> float:
    """The routed experts' parameters one GPU holds: its 1/ep of the experts, 1/tp of each, of
    its 1/pp of the MoE blocks (a whole model's: spread evenly)."""
    for name, x in (("ep", ep), ("tp", tp), ("pp", pp)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {x!r}")
    if moe.experts % ep:
        raise ValueError(f"ep={ep} does not divide the {moe.experts} experts: each ep rank holds experts/ep of them")
    return (shape.layers - moe.dense_layers) * moe.experts * mlp_parameters(shape, moe.ffn) / (ep * tp * pp)


def all_to_all(
    shape: ModelShape,
    moe: Experts,
    micro_batch: int,
    *,
    ep: int,
    link: Link,
    precision: str = "bf16-mixed",
    cp: int = 1,
    phase: str = "forward",
) -> dict[str, Any]:
    """One MoE block's all-to-alls for one micro-batch of `micro_batch` sequences (s/cp positions
    each) in `phase`: the buffers (traffic.moe_exchanges: dispatch and combine, or their
    gradients), the bytes a rank sends ((ep−1)/ep of each) and the time on `link`
    (sim/network.ring: ep − 1 steps of latency + buffer/ep / bandwidth each)."""
    tokens = micro_batch * shape.seq // cp
    e = VALUE_BYTES.get(precision)
    if e is None:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(VALUE_BYTES)}")
    buffers = moe_exchanges(phase, tokens, moe.experts, moe.top_k, moe.capacity_factor, shape.hidden, e)
    kind = TrafficKind.EP_ALL_TO_ALL
    return {
        "buffers": buffers,
        "sent": sum(ring_bytes(kind, b, ep) for b in buffers),
        "time": sum(ring(kind, b, ep, link) for b in buffers),
    }


__all__ = [
    "Experts",
    "LatentAttention",
    "MOE_MODELS",
    "moe_parameters",
    "mlp_parameters",
    "expert_parameters_per_gpu",
    "all_to_all",
]
