"""A mixture-of-experts model's shape beyond its `ModelShape`: its experts (how many, how many a
token runs through, their width, the capacity factor) and DeepSeek's latent attention. Pure data,
so that the presets can hold MoE models beside the dense ones; experts.py counts them, and the
planner (footprint.py, evaluate.py) prices them."""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def active(self) -> int:
        """The expert MLPs one token runs through: its top_k routed ones and the shared ones."""
        return self.top_k + self.shared


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, §2.1): queries and keys/values
    through low-rank projections, keys split into a rotary part and the rest."""

    q_rank: int
    kv_rank: int
    nope: int  # qk_nope_head_dim
    rope: int  # qk_rope_head_dim
    v: int  # v_head_dim
