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
dense MLP. What is not wired in yet: the planner's search (`minipipe plan`) does not try ep, so
these figures are for a learner's own layouts and the lesson to come.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..sim.network import Link, ring
from ..traffic import TrafficKind, moe_exchanges, ring_bytes
from .presets import LLAMA_STYLE
from .shapes import VALUE_BYTES, ModelShape, count, embedding_tensors, head_tensors, layer_tensors


@dataclass(frozen=True)
class Experts:
    """The mixture-of-experts part of a model. capacity_factor None: dropless (every choice runs,
    the all-to-all carries tokens · top_k rows on average)."""

    experts: int
    top_k: int
    ffn: int  # each expert's inner width
    shared: int = 0  # experts every token runs through (DeepSeek's shared experts)
    dense_layers: int = 0  # the first blocks keep the model's dense MLP
    router_bias: bool = False  # a per-expert bias on the router (DeepSeek-V3's e_score_correction_bias)
    capacity_factor: float | None = None

    def __post_init__(self) -> None:
        for key in ("experts", "top_k", "ffn"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} choices per token need at least as many experts, got {self.experts}")


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, §2.1): queries and keys/values
    through low-rank projections, keys split into a rotary part and the rest."""

    q_rank: int
    kv_rank: int
    nope: int  # qk_nope_head_dim
    rope: int  # qk_rope_head_dim
    v: int  # v_head_dim


def _mlp(shape: ModelShape, ffn: int) -> int:
    return (3 if shape.gated else 2) * shape.hidden * ffn + (
        ffn * (2 if shape.gated else 1) + shape.hidden
    ) * shape.bias


def _attention_and_norms(shape: ModelShape, latent: LatentAttention | None) -> int:
    """A block's parameters but its MLP."""
    whole = count(layer_tensors(shape), 1)[0] - _mlp(shape, shape.inner)
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
    outside = count(embedding_tensors(shape, False), 1)[0] + count(head_tensors(shape, False, 1), 1)[0]
    base = _attention_and_norms(shape, latent)
    router = moe.experts * shape.hidden + moe.experts * moe.router_bias
    expert = _mlp(shape, moe.ffn)
    dense = moe.dense_layers * (base + _mlp(shape, shape.inner))
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
    return (shape.layers - moe.dense_layers) * moe.experts * _mlp(shape, moe.ffn) / (ep * tp * pp)


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


_MIXTRAL = (
    "Jiang et al. 2024, Mixtral of Experts (arXiv:2401.04088), Table 1: dim 4096, n_layers 32, head_dim 128, "
    "hidden_dim 14336, n_heads 32, n_kv_heads 8, vocab_size 32000, num_experts 8, top_k_experts 2; the "
    "architecture of Mistral 7B (RMSNorm, SwiGLU, rotary positions, no biases, untied head) and no router "
    "bias (the released mistralai/Mixtral-8x7B-v0.1 config.json: num_local_experts 8, num_experts_per_tok "
    "2). Dropless routing (the paper's, MegaBlocks). Published: 46.7B parameters, 12.9B per token (Mistral "
    "AI, 'Mixtral of experts', 2023-12-11; the paper rounds to 47B and 13B). Sequence 4096: the planner's "
    "choice (the paper's context is 32768)"
)
_DEEPSEEK_V3 = (
    "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437), §4.2: 61 layers, hidden 7168, "
    "128 heads, MLA with kv rank 512, q rank 1536, per-head 128 + 64 (rotary) query/key dims and 128 "
    "value dims; every block but the first three MoE: 1 shared and 256 routed experts of inner width "
    "2048, 8 per token; vocab 129280 (the released config.json: first_k_dense_replace 3, "
    "intermediate_size 18432 for the dense blocks, tie_word_embeddings false, a router "
    "e_score_correction_bias per expert); training sequences 4096 (§4.2). Published: 671B parameters, "
    "37B per token (§1; the released weights' README: 36.6B, the multi-token-prediction module apart)"
)

MOE_MODELS: dict[str, tuple[ModelShape, Experts, LatentAttention | None]] = {
    "mixtral-8x7b": (
        ModelShape(
            "Mixtral 8x7B",
            32,
            4096,
            32,
            32000,
            4096,
            ffn=14336,
            kv_heads=8,
            **LLAMA_STYLE,
            source=_MIXTRAL,
        ),
        Experts(experts=8, top_k=2, ffn=14336),
        None,
    ),
    "deepseek-v3": (
        ModelShape(
            "DeepSeek-V3",
            61,
            7168,
            128,
            129280,
            4096,
            ffn=18432,
            **LLAMA_STYLE,
            source=_DEEPSEEK_V3,
        ),
        Experts(experts=256, top_k=8, ffn=2048, shared=1, dense_layers=3, router_bias=True),
        LatentAttention(q_rank=1536, kv_rank=512, nope=128, rope=64, v=128),
    ),
}
