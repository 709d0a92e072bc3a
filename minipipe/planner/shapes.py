"""A transformer by its shape, and what the shape alone decides: parameters, bytes per parameter,
work (FLOPs) and activations, per tensor-parallel shard. Pure arithmetic, no torch, so it works at
the size of published models as easily as at the course's; the course's lessons and the planner
read the same formulas.

    from minipipe.planner.presets import MODELS
    from minipipe.planner.shapes import parameters, training_bytes
    parameters(MODELS["gpt3-175b"])                       # 174.6 billion
    training_bytes(MODELS["gpt3-175b"], micro_batch=1)    # {'parameters': ..., 'activations': ...}

The shapes: a GPT-2/GPT-3 block by default (LayerNorm, attention with a fused QKV projection, a GELU
MLP 4·h wide, biases, learned positions, the head tied to the embedding: 12h² + 13h parameters a
block), or Llama-style ones (grouped-query attention, a gated SwiGLU MLP, RMSNorm, no biases, rotary
positions). Tensor parallelism splits every layer as Megatron does (Shoeybi et al. 2019, as
parallel/tensor.py does it):

    split over tp     QKV and the MLP's first Linear by output features (column-parallel), the
                      attention projection and the MLP's second Linear by input features (row-
                      parallel), the embedding and the head by vocabulary when `vocab_parallel`
    replicated        norms, the row-parallel layers' biases, learned positions; the embedding
                      and head too when not vocab-parallel (minipipe's engine keeps them whole)

Bytes per parameter: Rajbhandari et al. 2020 ("ZeRO"), §3.1: mixed-precision Adam keeps 2 + 2 bytes
(16-bit weights and gradients) and 12 of fp32 state (master weights, momentum, variance).

Work per token, forward, one block: 2 FLOPs per weight of every matmul, plus attention's QKᵀ and AV,
2·s·h each (every query against all s keys: the convention of Megatron's and PaLM's FLOP counts,
which causal masking does not halve). The head adds 2·h·vocab. Backward costs twice the forward;
recomputation (minipipe/sim/recompute_costs.py) repeats a part of the forward.

Activations per block and micro-batch: Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", §4) term by term, extended to gated MLPs and grouped-query attention,
and split as their Table 2: with tensor parallelism the norms' inputs, the inputs of QKV and of the
MLP and the dropout masks stay whole on every rank (10·s·b·h bytes in 16-bit) and the rest is split;
sequence parallelism splits those too. In 16-bit, with dropout and the scores materialized, that
is their s·b·h·(34 + 5·a·s/h) — plus the norms' per-position statistics (fp32 mean and 1/std), which
the paper leaves out (under 1 % at any real width) and autograd keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..sim import recompute_costs as recomputation

VALUE_BYTES = {"fp32": 4, "bf16-mixed": 2, "fp16-mixed": 2}  # one stored value, as the layers compute
OPTIMIZERS = ("adam", "sgd", "sgd-momentum")
KINDS = ("parameters", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer, by its shape. Defaults describe a GPT-2/GPT-3 block."""

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int | None = None  # the MLP's inner width (4·hidden when None)
    kv_heads: int | None = None  # grouped-query attention: key/value heads (None: = heads)
    gated: bool = False  # SwiGLU MLP: gate and up projections, then down (3 matrices)
    bias: bool = True  # Linears and norms have biases
    norm: str = "layernorm"  # "layernorm" (weight, bias) or "rmsnorm" (weight)
    positions: str = "learned"  # "learned" (a seq × hidden table) or "rotary" (no parameters)
    tied_head: bool = True  # the head reuses the token embedding
    head_bias: bool = False
    dropout: bool = True
    attention: str = "materialized"  # "materialized" (s×s scores kept) or "fused" (flash attention)
    batch: int | None = None  # a published global batch, in sequences (the planner's default)
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "vocab", "seq"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
        for key in ("ffn", "kv_heads", "batch"):  # optional, but never 0 or negative (None: the default)
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{key} must be a whole number >= 1 (or left out), got {value!r}")
        for key in ("gated", "bias", "tied_head", "head_bias", "dropout"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be True or False, got {getattr(self, key)!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"hidden={self.hidden} must be a multiple of heads={self.heads} "
                f"(each head gets hidden/heads dimensions)"
            )
        if self.heads % self.kv:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv}")
        if (
            self.norm not in ("layernorm", "rmsnorm")
            or self.positions not in ("learned", "rotary")
            or self.attention not in ("materialized", "fused")
        ):
            raise ValueError(
                f"norm must be layernorm or rmsnorm, positions learned or rotary, attention "
                f"materialized or fused; got {self.norm!r}, {self.positions!r}, {self.attention!r}"
            )

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

    def with_(self, **changes: Any) -> ModelShape:
        return replace(self, **changes)


def course_gpt(task: Any) -> ModelShape:
    """The course GPT (`minipipe.make_task("gpt", ...)`) as the engine runs it: no dropout; torch's
    scaled_dot_product_attention keeps no s² scores; its head (Readout: LayerNorm, Linear with a
    bias) is not tied to the embedding; its sequence is `block`. It computes in fp32: pass that
    precision."""
    return ModelShape(
        f"course GPT (depth {task.depth})",
        task.depth,
        task.width,
        task.heads,
        task.vocab,
        task.block,
        tied_head=False,
        head_bias=True,
        dropout=False,
        attention="fused",
    )


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
    out += [(h * h, True)] + [(h, False)] * shape.bias  # attention projection (row-parallel)
    out += _norm(shape) + [(up * h, True)] + [(up, True)] * shape.bias
    out += [(h * f, True)] + [(h, False)] * shape.bias  # MLP down (row-parallel)
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
    return _norm(shape) + [(shape.vocab * h, vocab_parallel)] * own + [(shape.vocab, vocab_parallel)] * shape.head_bias


def count(tensors: Sequence[tuple[int, bool]], tp: int) -> tuple[int, int]:
    """(elements one tp rank holds, tensors) of a tensor list."""
    return sum(n // tp if split else n for n, split in tensors), len(tensors)


def layer_parameters(shape: ModelShape) -> int:
    """One block's parameters: 12h² + 13h for a GPT block with the usual 4h MLP."""
    return sum(n for n, _tp_split in layer_tensors(shape))


def parameters(shape: ModelShape) -> int:
    """Every parameter of the whole model (the head counted once when tied)."""
    outside = sum(n for n, _tp_split in embedding_tensors(shape, False) + head_tensors(shape, False, 1))
    return outside + shape.layers * layer_parameters(shape)


@dataclass(frozen=True)
class BytesPerParameter:
    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def bytes_per_parameter(precision: str = "fp32", optimizer: str = "adam") -> BytesPerParameter:
    """Bytes each parameter costs in training.

    precision: "fp32" (weights, gradients and optimizer state in fp32), or "bf16-mixed" /
        "fp16-mixed" (16-bit weights and gradients for the compute, plus an fp32 master copy of
        the weights that the optimizer updates: ZeRO §3.1's 2 + 2 + 12 = 16 bytes with Adam).
    optimizer: "adam" (two fp32 moments: 8 bytes), "sgd" (plain, no state), "sgd-momentum"
        (one fp32 buffer: 4 bytes). torch also keeps one 4-byte step counter per parameter
        tensor for Adam; that is per tensor, not per parameter (the planner counts it).
    """
    if precision not in VALUE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(VALUE_BYTES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    moments = {"adam": 8, "sgd": 0, "sgd-momentum": 4}[optimizer]
    if precision == "fp32":
        return BytesPerParameter(4, 4, moments)
    return BytesPerParameter(2, 2, 4 + moments)  # + the fp32 master weights


# -- work ---------------------------------------------------------------------------------------
def attention_flops(shape: ModelShape, tokens: int) -> float:
    """Forward FLOPs of attention's QKᵀ and AV alone for `tokens` tokens (all tp ranks together)."""
    return tokens * 4 * shape.seq * shape.hidden


def layer_flops(shape: ModelShape, tokens: int) -> float:
    """Forward FLOPs of one block for `tokens` = micro-batch · seq tokens (the whole block, all
    tp ranks together)."""
    h, f, kv = shape.hidden, shape.inner, shape.kv_width
    weights = h * (h + 2 * kv) + h * h + (3 if shape.gated else 2) * h * f
    return tokens * 2 * weights + attention_flops(shape, tokens)


def layer_work(shape: ModelShape, tokens: int) -> dict[str, float]:
    """A block's forward FLOPs by the parts recomputation tells apart (recompute.WORK_PARTS)."""
    core = attention_flops(shape, tokens)
    return {"attention core": core, "other": layer_flops(shape, tokens) - core}


def recompute_flops(shape: ModelShape, tokens: int, recompute: str) -> float:
    """FLOPs one block's backward repeats of its forward under `recompute`. A fused attention
    keeps no scores to drop (its backward recomputes them inside, whatever the option), so
    "selective" is "none" for it."""
    option = recomputation.block_option(recompute)
    if shape.attention == "fused" and option.name == "selective":
        return 0.0
    return option.redone(layer_work(shape, tokens))


def head_flops(shape: ModelShape, tokens: int) -> float:
    return tokens * 2 * shape.hidden * shape.vocab


def model_flops(shape: ModelShape, sequences: int) -> float:
    """FLOPs of a training step on `sequences` sequences, without recomputation (the numerator of
    model FLOPs utilisation): three times the forward of every block and the head."""
    tokens = sequences * shape.seq
    return 3 * (shape.layers * layer_flops(shape, tokens) + head_flops(shape, tokens))


# -- activations --------------------------------------------------------------------------------
def _value_bytes(precision: str) -> int:
    if precision not in VALUE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(VALUE_BYTES)}")
    return VALUE_BYTES[precision]


def norm_statistics_bytes(shape: ModelShape, micro_batch: int, norms: int = 2) -> float:
    """The fp32 per-position statistics `norms` norms keep (mean and 1/std for a LayerNorm,
    1/std for an RMSNorm): what Korthikanti et al.'s count leaves out."""
    return (2 if shape.norm == "layernorm" else 1) * 4 * shape.seq * micro_batch * norms


def layer_activation_parts(
    shape: ModelShape,
    micro_batch: int,
    precision: str = "bf16-mixed",
    tp: int = 1,
    *,
    sequence_parallel: bool = False,
    cp: int = 1,
) -> dict[str, float]:
    """Bytes one block saves for its backward, one micro-batch, one tp (and cp) rank, by part
    (recompute.ACTIVATION_PARTS).

    Kept whole on every tp rank (split too with sequence parallelism): the two norms' inputs (the
    first is the block's "input") and their statistics, the inputs of QKV and of the MLP, the
    1-byte dropout masks after attention and after the MLP. Split: Q, K and V, attention's output,
    the MLP's inner activations (a GELU MLP keeps its input and output, 2·f wide; a gated one gate,
    up, SiLU(gate) and their product, 4·f), and either attention's s² "attention scores"
    (materialized: the softmax output, and with dropout its mask and output) or a fused
    attention's fp32 log-sum-exp per head and position. Context parallelism gives each of its cp
    ranks s/cp of the positions (their scores against all s keys)."""
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise ValueError(f"micro_batch must be a whole number >= 1, got {micro_batch!r}")
    e, b, h, a = _value_bytes(precision), micro_batch, shape.hidden, shape.heads
    s = shape.seq / cp  # this rank's positions
    sbh = s * b * h
    whole = 1 / tp if sequence_parallel else 1.0
    kept_whole = 2 * e * sbh + norm_statistics_bytes(shape, b) / cp + 2 * e * sbh + (2 * sbh if shape.dropout else 0)
    split = e * s * b * (h + 2 * shape.kv_width) + e * sbh + (4 if shape.gated else 2) * e * s * b * shape.inner
    scores = 0.0
    if shape.attention == "fused":
        split += 4 * a * s * b
    else:
        scores = (e + ((1 + e) if shape.dropout else 0)) * a * s * shape.seq * b / tp
    block_input = e * sbh * whole
    return {"input": block_input, "attention scores": scores, "other": kept_whole * whole + split / tp - block_input}


def layer_activation_bytes(
    shape: ModelShape,
    micro_batch: int,
    precision: str = "bf16-mixed",
    tp: int = 1,
    *,
    sequence_parallel: bool = False,
    recompute: str = "none",
    cp: int = 1,
) -> float:
    """Bytes one block keeps for its backward, one micro-batch, one tp rank, under `recompute`
    ("full": only the block's input; "selective": all but the s² scores; see
    minipipe/sim/recompute_costs.py)."""
    option = recomputation.block_option(recompute)
    return option.kept(
        layer_activation_parts(shape, micro_batch, precision, tp, sequence_parallel=sequence_parallel, cp=cp)
    )


def hidden_bytes(shape: ModelShape, micro_batch: int, value_bytes: float, tp: int = 1, cp: int = 1) -> float:
    """One micro-batch's hidden states on one rank (its micro_batch · s/cp tokens), 1/tp of them where tp
    slices them: tp = 1 what a tp collective moves, a tp rank's 1/tp the message between stages (Megatron's)."""
    return value_bytes * micro_batch * shape.seq / cp * shape.hidden / tp


def ring_kv_bytes(shape: ModelShape, micro_batch: int, value_bytes: float, tp: int = 1, cp: int = 1) -> float:
    """One rank's K and V blocks for ring attention (context parallelism): its micro_batch · s/cp tokens'
    keys and values for its kv_heads/tp heads, what each ring step passes on (traffic.ring_attention_steps)."""
    return 2 * value_bytes * micro_batch * shape.seq / cp * shape.kv_width / tp


def embedding_activation_bytes(shape: ModelShape, micro_batch: int, cp: int = 1) -> float:
    """What the first stage keeps beyond its blocks: the token ids (int64) the embedding's
    backward needs, and the positions' (int64) for a learned position table."""
    return (8 * shape.seq * micro_batch + (8 * shape.seq if shape.positions == "learned" else 0)) / cp


def head_activation_bytes(
    shape: ModelShape,
    micro_batch: int,
    precision: str = "bf16-mixed",
    tp: int = 1,
    *,
    sequence_parallel: bool = False,
    vocab_parallel: bool = True,
    cp: int = 1,
) -> float:
    """What the last stage keeps beyond its blocks: the final norm's input and statistics, the
    head's input, the fp32 log-probabilities the cross-entropy's backward needs (split by
    vocabulary when the head is) and the int64 targets."""
    e, s, b, h = _value_bytes(precision), shape.seq / cp, micro_batch, shape.hidden
    whole = 1 / tp if sequence_parallel else 1.0
    logits = 4 * s * b * shape.vocab / (tp if vocab_parallel else 1)
    return (2 * e * s * b * h + norm_statistics_bytes(shape, b, norms=1) / cp) * whole + logits + 8 * s * b


def activation_bytes(
    shape: ModelShape, micro_batch: int, precision: str = "bf16-mixed", *, in_flight: int = 1, layers: int | None = None
) -> float:
    """Activations of `layers` blocks (default: all) for `in_flight` micro-batches held at once (a pipeline rank
    under GPipe holds m of them, under 1F1B up to p), on one device; not the embedding's and the head's (small)."""
    n = shape.layers if layers is None else layers
    return in_flight * n * layer_activation_bytes(shape, micro_batch, precision)


def training_bytes(
    shape: ModelShape,
    micro_batch: int = 1,
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    *,
    in_flight: int = 1,
) -> dict[str, float]:
    """Memory of training the whole model on one device, by kind (KINDS); activations as activation_bytes."""
    n, per = parameters(shape), bytes_per_parameter(precision, optimizer)
    return {
        "parameters": n * per.parameters,
        "gradients": n * per.gradients,
        "optimizer": n * per.optimizer,
        "activations": activation_bytes(shape, micro_batch, precision, in_flight=in_flight),
    }


def stage_layers(layers: int, stages: int) -> list[int]:
    """Blocks per stage, `layers` cut into `stages` contiguous stages as evenly as possible, the earlier taking
    the extra; the embedding and head come besides (the engine's uniform cut counts them as layers too)."""
    return [layers // stages + (1 if s < layers % stages else 0) for s in range(stages)]
