"""A transformer's size, work and activations, per tensor-parallel shard: what the planner counts.

footprint.py counts a GPT-style model on one device. Planning a run at scale also needs the
shapes of Llama-style models (grouped-query attention, a gated SwiGLU MLP, RMSNorm, no biases,
rotary positions) and what each GPU holds and computes once tensor parallelism has split every
layer (Megatron's split: Shoeybi et al. 2019, as parallel/tensor.py does it):

    split over tp     QKV and the MLP's first Linear by output features (column-parallel), the
                      attention projection and the MLP's second Linear by input features (row-
                      parallel), the embedding and the head by vocabulary when `vocab_parallel`
    replicated        norms, the row-parallel layers' biases, learned positions; the embedding
                      and head too when not vocab-parallel (minipipe's engine keeps them whole)

For the GPT shapes footprint.py covers, the counts here equal its own (tests/test_plan.py checks).

Work (FLOPs) per token, forward, one block: 2 per weight of every matmul, plus attention's QKᵀ
and AV, 2·s·h each (every query against all s keys: the convention of Megatron's and PaLM's FLOP
counts, which causal masking does not halve). The head adds 2·h·vocab. Backward costs twice the
forward; recomputation adds a forward (full) or attention's QKᵀ, softmax and AV (selective).

Activations per block and micro-batch: footprint.py's derivation term by term (Korthikanti et al.
2022 §4), extended to gated MLPs and grouped-query attention, and split as Korthikanti's Table 2:
with tensor parallelism the norms' inputs, the inputs of QKV and of the MLP and the dropout masks
stay whole on every rank (10·s·b·h bytes in 16-bit) and the rest is split; sequence parallelism
splits those too. Full recomputation keeps only each block's input (plus one block's activations
while it is recomputed); selective recomputation drops attention's s² terms.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

VALUE_BYTES = {"fp32": 4, "bf16-mixed": 2, "fp16-mixed": 2}
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer, by its shape. Defaults describe a GPT-2/GPT-3 block."""

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int | None = None            # the MLP's inner width (4·hidden when None)
    kv_heads: int | None = None       # grouped-query attention: key/value heads (None: = heads)
    gated: bool = False               # SwiGLU MLP: gate and up projections, then down (3 matrices)
    bias: bool = True                 # Linears and norms have biases
    norm: str = "layernorm"           # "layernorm" (weight, bias) or "rmsnorm" (weight)
    positions: str = "learned"        # "learned" (a seq × hidden table) or "rotary" (no parameters)
    tied_head: bool = True            # the head reuses the token embedding
    head_bias: bool = False
    dropout: bool = True
    attention: str = "materialized"   # "materialized" (s×s scores kept) or "fused" (flash attention)
    batch: int | None = None          # a published global batch, in sequences (the planner's default)
    source: str = ""

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "vocab", "seq"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads}")
        if self.heads % self.kv:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv}")
        if self.norm not in ("layernorm", "rmsnorm") or self.positions not in ("learned", "rotary") \
                or self.attention not in ("materialized", "fused"):
            raise ValueError(f"norm must be layernorm or rmsnorm, positions learned or rotary, attention "
                             f"materialized or fused; got {self.norm!r}, {self.positions!r}, {self.attention!r}")

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def inner(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Width of K (and of V): kv_heads · head size."""
        return self.kv * (self.hidden // self.heads)

    def with_(self, **changes) -> "ModelShape":
        return replace(self, **changes)

    @classmethod
    def from_footprint(cls, t, **extra) -> "ModelShape":
        """From a footprint.Transformer (GPT-style)."""
        return cls(t.name, t.layers, t.hidden, t.heads, t.vocab, t.seq, ffn=t.ffn, tied_head=t.tied_head,
                   head_bias=t.head_bias, **extra)


def course_gpt(task) -> ModelShape:
    """The course GPT (models.GPTTask) as the engine runs it: fp32 compute is the caller's
    precision; no dropout; torch's scaled_dot_product_attention keeps no s² scores; untied head
    with a bias (its Readout: LayerNorm, Linear)."""
    return ModelShape(f"course GPT (depth {task.depth})", task.depth, task.width, task.heads, task.vocab, task.block,
                      tied_head=False, head_bias=True, dropout=False, attention="fused")


# -- parameters: (elements, split over tp) per tensor -------------------------------------------
def _norm(shape: ModelShape) -> list[tuple[int, bool]]:
    h = shape.hidden
    return [(h, False), (h, False)] if shape.norm == "layernorm" else [(h, False)]


def layer_tensors(shape: ModelShape) -> list[tuple[int, bool]]:
    """Every parameter tensor of one block: (elements, split by tensor parallelism). QKV is one
    fused tensor (as Megatron and the course GPT hold it), the gated MLP's gate and up one too."""
    h, f, kv = shape.hidden, shape.inner, shape.kv_width
    qkv, up = h + 2 * kv, (2 if shape.gated else 1) * f
    out = _norm(shape) + [(qkv * h, True)] + [(qkv, True)] * shape.bias
    out += [(h * h, True)] + [(h, False)] * shape.bias                  # attention projection (row-parallel)
    out += _norm(shape) + [(up * h, True)] + [(up, True)] * shape.bias
    out += [(h * f, True)] + [(h, False)] * shape.bias                  # MLP down (row-parallel)
    return out


def embedding_tensors(shape: ModelShape, vocab_parallel: bool) -> list[tuple[int, bool]]:
    h = shape.hidden
    return [(shape.vocab * h, vocab_parallel)] + [(shape.seq * h, False)] * (shape.positions == "learned")


def head_tensors(shape: ModelShape, vocab_parallel: bool, pp: int) -> list[tuple[int, bool]]:
    """The final norm and the head. A tied head on a pipeline of pp > 1 ranks keeps its own copy
    of the embedding on the last rank (Megatron's arrangement: the two copies' gradients are
    summed each step), so it costs memory there too."""
    h = shape.hidden
    own = not shape.tied_head or pp > 1
    return _norm(shape) + [(shape.vocab * h, vocab_parallel)] * own \
        + [(shape.vocab, vocab_parallel)] * shape.head_bias


def count(tensors, tp: int) -> tuple[int, int]:
    """(elements one tp rank holds, tensors) of a tensor list."""
    return sum(n // tp if split else n for n, split in tensors), len(tensors)


def parameters(shape: ModelShape) -> int:
    """Every parameter of the whole model (the head counted once when tied)."""
    return (count(embedding_tensors(shape, False), 1)[0] + shape.layers * count(layer_tensors(shape), 1)[0]
            + count(head_tensors(shape, False, 1), 1)[0])


# -- work ---------------------------------------------------------------------------------------
def layer_flops(shape: ModelShape, tokens: int) -> float:
    """Forward FLOPs of one block for `tokens` = micro-batch · seq tokens (the whole block, all
    tp ranks together)."""
    h, f, kv = shape.hidden, shape.inner, shape.kv_width
    weights = h * (h + 2 * kv) + h * h + (3 if shape.gated else 2) * h * f
    return tokens * (2 * weights + 4 * shape.seq * h)


def attention_flops(shape: ModelShape, tokens: int) -> float:
    """Forward FLOPs of attention's QKᵀ and AV alone: what selective recomputation repeats."""
    return tokens * 4 * shape.seq * shape.hidden


def head_flops(shape: ModelShape, tokens: int) -> float:
    return tokens * 2 * shape.hidden * shape.vocab


def model_flops(shape: ModelShape, sequences: int) -> float:
    """FLOPs of a training step on `sequences` sequences, without recomputation (the numerator of
    model FLOPs utilisation): three times the forward of every block and the head."""
    tokens = sequences * shape.seq
    return 3 * (shape.layers * layer_flops(shape, tokens) + head_flops(shape, tokens))


# -- activations --------------------------------------------------------------------------------
def layer_activation_bytes(shape: ModelShape, micro_batch: int, precision: str = "bf16-mixed", tp: int = 1, *,
                           sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes one block keeps for its backward, for one micro-batch, on one tp rank.

    Kept whole on every tp rank (split too with sequence parallelism): the two norms' inputs and
    their per-position statistics (fp32: mean and 1/std for a LayerNorm, 1/std for RMSNorm), the
    inputs of QKV and of the MLP, the 1-byte dropout masks after attention and after the MLP.
    Split: Q, K and V, attention's output, the MLP's inner activations (a GELU MLP keeps its
    input and output, 2·f wide; a gated one gate, up, SiLU(gate) and their product, 4·f),
    attention's s² scores (materialized: the softmax output, and with dropout its mask and
    output) or a fused attention's fp32 log-sum-exp per head and position.

    recompute "full": only the block's input (split with sequence parallelism); "selective": as
    "none" without the s² scores (Korthikanti et al. 2022 §5).
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    if precision not in VALUE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(VALUE_BYTES)}")
    e, s, b, h, a = VALUE_BYTES[precision], shape.seq, micro_batch, shape.hidden, shape.heads
    sbh = s * b * h
    whole = 1 / tp if sequence_parallel else 1.0
    if recompute == "full":
        return e * sbh * whole
    stats = (2 if shape.norm == "layernorm" else 1) * 4 * s * b * 2
    kept_whole = 2 * e * sbh + stats + 2 * e * sbh + (2 * sbh if shape.dropout else 0)
    qkv = e * s * b * (h + 2 * shape.kv_width)
    mlp = (4 if shape.gated else 2) * e * s * b * shape.inner
    split = qkv + e * sbh + mlp
    if shape.attention == "fused":
        split += 4 * a * s * b
    elif recompute == "none":
        split += (e + ((1 + e) if shape.dropout else 0)) * a * s * s * b
    return kept_whole * whole + split / tp


def embedding_activation_bytes(shape: ModelShape, micro_batch: int) -> float:
    """What the first stage keeps beyond its blocks: the token ids (int64) the embedding's
    backward needs, and the positions' (int64) for a learned position table."""
    return 8 * shape.seq * micro_batch + (8 * shape.seq if shape.positions == "learned" else 0)


def head_activation_bytes(shape: ModelShape, micro_batch: int, precision: str = "bf16-mixed", tp: int = 1, *,
                          sequence_parallel: bool = False, vocab_parallel: bool = True) -> float:
    """What the last stage keeps beyond its blocks: the final norm's input and statistics, the
    head's input, the fp32 log-probabilities the cross-entropy's backward needs (split by
    vocabulary when the head is) and the int64 targets."""
    e, s, b, h = VALUE_BYTES[precision], shape.seq, micro_batch, shape.hidden
    whole = 1 / tp if sequence_parallel else 1.0
    stats = (2 if shape.norm == "layernorm" else 1) * 4 * s * b
    logits = 4 * s * b * shape.vocab / (tp if vocab_parallel else 1)
    return (2 * e * s * b * h + stats) * whole + logits + 8 * s * b


def stage_layers(layers: int, stages: int) -> list[int]:
    """Blocks per stage when `layers` blocks are cut into `stages` contiguous stages as evenly as
    possible, the earlier stages taking the extra ones (partition.py's uniform cut)."""
    return [layers // stages + (1 if s < layers % stages else 0) for s in range(stages)]

