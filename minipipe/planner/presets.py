"""Published shapes of well-known models and published figures of common GPUs, each with its source.

Every number here is copied from the source named next to it; where a figure had to be derived
(a dense peak from a datasheet that quotes it with sparsity, bytes per second from gigabits),
the derivation is written out. Nothing is measured or guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .moe_shape import Experts, LatentAttention
from .shapes import ModelShape

GB = 10**9  # datasheets give memory and bandwidth in decimal units

# -- models ---------------------------------------------------------------------------------
_GPT3 = (
    "Brown et al. 2020, Language Models are Few-Shot Learners (arXiv:2005.14165), Table 2.1: 96 layers, "
    "d_model 12288, 96 heads, context 2048; vocabulary 50257 (GPT-2's BPE, Radford et al. 2019); a GPT-2 "
    "block (LayerNorm, biases, learned positions, head tied to the embedding). Global batch 1536 sequences "
    "as Narayanan et al. 2021 §5.1 train it (Brown et al. give 3.2M tokens, about 1563 sequences); dropout "
    "and materialized attention as Megatron-LM trains it (Korthikanti et al. 2022 §4)"
)
_LLAMA2 = (
    "Touvron et al. 2023, Llama 2 (arXiv:2307.09288), §2.2 and Table 1: context 4096, global batch 4M tokens "
    "(1024 sequences), grouped-query attention for 70B; the architecture of Llama 1 (Touvron et al. 2023, "
    "arXiv:2302.13971, §2.2 and Table 2: pre-norm RMSNorm, SwiGLU, rotary positions, no biases, untied "
    "head); widths from the released model configuration (vocab 32000; 7B: dim 4096, 32 layers, 32 heads, "
    "ffn 11008; 70B: dim 8192, 80 layers, 64 heads, 8 key/value heads, ffn 28672)"
)
_LLAMA3 = (
    "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Table 3: 126 layers, model dimension "
    "16384, FFN dimension 53248, 128 attention heads, 8 key/value heads (the table's vocabulary of '128,000' "
    "is 128256 in the released configuration); pre-training context 8192 and batch 16M tokens "
    "(2048 sequences, Table 4)"
)
_FUSED = "; attention fused (flash attention): the planner's assumption for a current run, not the paper's"

_GPT3_FAMILY = (
    "Brown et al. 2020, Table 2.1 (n_layers, d_model, n_heads; context 2048 for every size), with the "
    "block and vocabulary of GPT-3 175B. No global batch in sequences: the table gives it in tokens "
    "(pass batch=). GPT-3 XL and 13B are left out: their rows give n_heads · d_head != d_model"
)

# the block Llama 2, Llama 3 and Mixtral share: gated SwiGLU MLP, no biases, RMSNorm, rotary positions,
# an untied head, no dropout, fused attention
LLAMA_STYLE: dict[str, Any] = dict(
    gated=True, bias=False, norm="rmsnorm", positions="rotary", tied_head=False, dropout=False, attention="fused"
)

MODELS: dict[str, ModelShape] = {
    "gpt3-125m": ModelShape("GPT-3 Small (125M)", 12, 768, 12, 50257, 2048, source=_GPT3_FAMILY),
    "gpt3-2.7b": ModelShape("GPT-3 2.7B", 32, 2560, 32, 50257, 2048, source=_GPT3_FAMILY),
    "gpt3-6.7b": ModelShape("GPT-3 6.7B", 32, 4096, 32, 50257, 2048, source=_GPT3_FAMILY),
    "gpt3-175b": ModelShape("GPT-3 175B", 96, 12288, 96, 50257, 2048, batch=1536, source=_GPT3),
    "llama2-7b": ModelShape(
        "Llama 2 7B",
        32,
        4096,
        32,
        32000,
        4096,
        ffn=11008,
        **LLAMA_STYLE,
        batch=1024,
        source=_LLAMA2 + _FUSED,
    ),
    "llama2-70b": ModelShape(
        "Llama 2 70B",
        80,
        8192,
        64,
        32000,
        4096,
        ffn=28672,
        kv_heads=8,
        **LLAMA_STYLE,
        batch=1024,
        source=_LLAMA2 + _FUSED,
    ),
    "llama3-405b": ModelShape(
        "Llama 3.1 405B",
        126,
        16384,
        128,
        128256,
        8192,
        ffn=53248,
        kv_heads=8,
        **LLAMA_STYLE,
        batch=2048,
        source=_LLAMA3 + _FUSED,
    ),
}


# -- mixture-of-experts models: the shape of their attention, norms and dense blocks, their experts, and
# DeepSeek's latent attention (moe_shape.py); the planner runs them by name as the dense ones
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


# -- GPUs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPU:
    """One GPU and the node it is sold in.

    memory: bytes; peak: dense 16-bit (bf16) tensor-core FLOP/s; nvlink: bytes/s each way between
    two GPUs of a node; network: bytes/s each way out of the node per GPU (one network card per
    GPU in these nodes); gpus_per_node: GPUs a node holds; hbm: bytes/s of the GPU's own memory
    (what element-wise work and the optimizer step are bound by; None: not priced)."""

    name: str
    memory: float
    peak: float
    nvlink: float
    network: float
    gpus_per_node: int
    source: str
    hbm: float | None = None

    def __post_init__(self) -> None:
        for key in ("memory", "peak", "nvlink", "network"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"GPU {key} must be a finite number > 0, got {value!r}")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be a whole number >= 1, got {self.gpus_per_node!r}")
        if self.hbm is not None and (
            isinstance(self.hbm, bool) or not isinstance(self.hbm, (int, float)) or not 0 < self.hbm < math.inf
        ):
            raise ValueError(f"hbm must be a number of bytes/s > 0 (or None), got {self.hbm!r}")


GPUS: dict[str, GPU] = {
    "a100-80gb": GPU(
        "A100 SXM 80GB",
        memory=80 * GB,
        peak=312e12,
        nvlink=600 * GB / 2,
        network=200e9 / 8,
        gpus_per_node=8,
        source="NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM, 80GB HBM2e, BF16 Tensor Core 312 TFLOPS "
        "(624 with sparsity), NVLink 600 GB/s (both directions: 300 each way); NVIDIA DGX A100 datasheet: "
        "8 GPUs, 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand for the cluster network (25 GB/s each way "
        "per GPU); A100 80GB SXM GPU memory bandwidth 2,039 GB/s",
        hbm=2039 * GB,
    ),
    "h100-sxm": GPU(
        "H100 SXM 80GB",
        memory=80 * GB,
        peak=1979e12 / 2,
        nvlink=900 * GB / 2,
        network=400e9 / 8,
        gpus_per_node=8,
        source="NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, 80GB, BF16 Tensor Core 1,979 TFLOPS with "
        "sparsity (989.5 dense, half of it), NVLink 900 GB/s (450 each way); NVIDIA DGX H100 datasheet: "
        "8 GPUs, 8 ConnectX-7 400 Gb/s InfiniBand/Ethernet ports for the cluster (50 GB/s each way per GPU); "
        "H100 SXM GPU memory bandwidth 3.35 TB/s",
        hbm=3350 * GB,
    ),
    "h200": GPU(
        "H200 SXM 141GB",
        memory=141 * GB,
        peak=1979e12 / 2,
        nvlink=900 * GB / 2,
        network=400e9 / 8,
        gpus_per_node=8,
        source="NVIDIA H200 Tensor Core GPU datasheet: H200 SXM, 141GB HBM3e, BF16 Tensor Core 1,979 TFLOPS with "
        "sparsity (989.5 dense), NVLink 900 GB/s (450 each way); NVIDIA DGX H200 datasheet: 8 GPUs, "
        "8 ConnectX-7 400 Gb/s ports for the cluster (50 GB/s each way per GPU); H200 SXM GPU memory "
        "bandwidth 4.8 TB/s",
        hbm=4800 * GB,
    ),
    "h800": GPU(
        "H800 SXM 80GB",
        memory=80 * GB,
        peak=1979e12 / 2,
        nvlink=400 * GB / 2,
        network=400e9 / 8,
        gpus_per_node=8,
        source="From memory, not checked against a datasheet here (NVIDIA publishes none for the H800 where "
        "this was written): the H100 SXM's die, memory and tensor cores (80GB HBM3 at 3.35 TB/s, BF16 989.5 "
        "TFLOPS dense) with NVLink cut to 400 GB/s (200 each way); DeepSeek-AI 2024, DeepSeek-V3 Technical "
        "Report (arXiv:2412.19437), §3.1-3.2: 8 GPUs a node on NVLink and NVSwitch, InfiniBand between nodes "
        "(50 GB/s per GPU), NVLink achieving about 160 GB/s",
        hbm=3350 * GB,
    ),
}


def model(name: str | ModelShape) -> ModelShape:
    if isinstance(name, ModelShape):
        return name
    key = str(name).lower()
    if key not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; choose one of {', '.join(MODELS)} (mixture-of-experts: "
            f"{', '.join(MOE_MODELS)}, by name through make_setup or minipipe plan), or describe your own with "
            f"minipipe.planner.shapes.ModelShape(name, layers, hidden, heads, vocab, seq, ...), or a "
            f"TOML/JSON file (minipipe plan --model FILE)"
        )
    return MODELS[key]


def gpu(name: str | GPU) -> GPU:
    if isinstance(name, GPU):
        return name
    key = str(name).lower()
    if key not in GPUS:
        raise ValueError(
            f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}, or describe your own with "
            f"minipipe.planner.presets.GPU(name, memory, peak, nvlink, network, gpus_per_node, source, hbm), "
            f"or a TOML/JSON file (minipipe plan --gpu FILE)"
        )
    return GPUS[key]
