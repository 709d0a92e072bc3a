"""How much memory training a GPT-style transformer needs, by kind: parameters, gradients,
optimizer state, activations. Pure arithmetic on a model's shape, no torch, so it works at the
size of published models as easily as at the course's.

    from minipipe.planner.footprint import Transformer, PUBLISHED, training_bytes
    gpt3 = PUBLISHED["GPT-3 175B"]
    training_bytes(gpt3, micro_batch=1, precision="bf16-mixed", optimizer="adam")
    # {'parameters': ..., 'gradients': ..., 'optimizer': ..., 'activations': ...}

Where the formulas come from:
- parameters: counted layer by layer from the shape (a pre-norm GPT-2/GPT-3 block: 12h² + 13h
  with the usual 4h MLP); `Transformer` says whether the output head is tied to the embedding.
- bytes per parameter: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
  Trillion Parameter Models", §3.1: mixed-precision Adam keeps 2 + 2 bytes (16-bit weights and
  gradients) and 12 bytes of fp32 optimizer state (master weights, momentum, variance).
- activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", §4.1: s·b·h·(34 + 5·a·s/h) bytes per layer in 16-bit, with dropout and the attention
  scores materialised, without recomputation. `activation_bytes_per_layer` derives that
  count term by term, so the same derivation also gives fp32, no dropout, or fused attention.
"""
from __future__ import annotations

from dataclasses import dataclass

# bytes of one stored value; activations follow the precision the layers compute in
_VALUE_BYTES = {"fp32": 4, "bf16-mixed": 2, "fp16-mixed": 2}
OPTIMIZERS = ("adam", "sgd", "sgd-momentum")
KINDS = ("parameters", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class Transformer:
    """The shape of a GPT-style decoder: token and learned position embeddings, `layers`
    pre-norm blocks (LayerNorm, attention with a fused QKV projection, LayerNorm, a two-layer
    GELU MLP, all Linears with biases), a final LayerNorm and an output head.

    ffn: the MLP's inner width (4·hidden when None).
    tied_head: the head reuses the token embedding's weights (GPT-2, GPT-3), so it adds no
        parameters; False gives the head a vocab × hidden matrix of its own (the course GPT).
    head_bias: the head's Linear has a bias (the course GPT; GPT-2 and GPT-3 have none).
    """

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int | None = None
    tied_head: bool = True
    head_bias: bool = False
    name: str = ""

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "vocab", "seq"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Transformer {key} must be a whole number >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads} "
                             f"(each head gets hidden/heads dimensions)")

    @property
    def inner(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden


def course_gpt(task) -> Transformer:
    """The shape of a course GPT task (`minipipe.models.make_task("gpt", ...)`): its head is a
    LayerNorm and a Linear with a bias, not tied to the embedding; its sequence is `block`."""
    return Transformer(layers=task.depth, hidden=task.width, heads=task.heads, vocab=task.vocab,
                       seq=task.block, tied_head=False, head_bias=True, name=f"course GPT (depth {task.depth})")


# Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (n_layers, d_model,
# n_heads; context 2048 tokens for every size), with GPT-2's BPE vocabulary of 50257 tokens
# (Radford et al. 2019). GPT-3 ties its output head to the token embedding, as GPT-2 does.
# (GPT-3 XL and 13B are left out: their table rows give n_heads · d_head != d_model.)
PUBLISHED = {
    "GPT-3 Small (125M)": Transformer(12, 768, 12, 50257, 2048, name="GPT-3 Small (125M)"),
    "GPT-3 2.7B": Transformer(32, 2560, 32, 50257, 2048, name="GPT-3 2.7B"),
    "GPT-3 6.7B": Transformer(32, 4096, 32, 50257, 2048, name="GPT-3 6.7B"),
    "GPT-3 175B": Transformer(96, 12288, 96, 50257, 2048, name="GPT-3 175B"),
}
SOURCE = ("Brown et al. 2020, Language Models are Few-Shot Learners (arXiv:2005.14165), Table 2.1; "
          "vocabulary 50257 from GPT-2 (Radford et al. 2019)")


# -- parameters -----------------------------------------------------------------------------
def layer_parameters(shape: Transformer) -> int:
    """One block: QKV (3h² + 3h), attention output (h² + h), MLP (2·h·f + f + h), two
    LayerNorms (4h). With f = 4h that is 12h² + 13h."""
    h, f = shape.hidden, shape.inner
    return (3 * h * h + 3 * h) + (h * h + h) + (2 * h * f + f + h) + 4 * h


def parameters(shape: Transformer) -> int:
    """Every parameter: embeddings (vocab·h + seq·h), the blocks, the final LayerNorm (2h), and
    the head when it is not tied (vocab·h, + vocab with a bias)."""
    h = shape.hidden
    head = (0 if shape.tied_head else shape.vocab * h) + (shape.vocab if shape.head_bias else 0)
    return shape.vocab * h + shape.seq * h + shape.layers * layer_parameters(shape) + 2 * h + head


# -- model state: parameters, gradients, optimizer ------------------------------------------
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
        tensor for Adam; that is per tensor, not per parameter, and left out here.
    """
    if precision not in _VALUE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(_VALUE_BYTES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    moments = {"adam": 8, "sgd": 0, "sgd-momentum": 4}[optimizer]
    if precision == "fp32":
        return BytesPerParameter(4, 4, moments)
    return BytesPerParameter(2, 2, 4 + moments)     # + the fp32 master weights


# -- activations ----------------------------------------------------------------------------
ATTENTION = ("materialized", "fused")


def activation_bytes_per_layer(shape: Transformer, micro_batch: int, precision: str = "bf16-mixed", *,
                               dropout: bool = True, attention: str = "materialized") -> int:
    """Bytes of activations one block keeps for its backward, for one micro-batch of
    `micro_batch` sequences, without recomputation.

    With the defaults this is Korthikanti et al. 2022's s·b·h·(34 + 5·a·s/h) (16-bit values,
    1-byte dropout masks). Term by term, with e bytes per value (2 in 16-bit, 4 in fp32):

        LayerNorm inputs (two)                               2·e·sbh
        QKV input; Q, K (for QKᵀ); V                        (1 + 2 + 1)·e·sbh
        attention-output projection input                      e·sbh
        MLP: first Linear input, GELU input, second Linear  (1 + 4 + 4)·e·sbh
                                            together: 16·e·sbh (with an MLP f wide: 7 + 1 + 2f/h)
        dropout masks after attention and after the MLP      2·sbh         (dropout)
        attention "materialized": softmax output          e·a·s²·b
                     its dropout mask and output         (1 + e)·a·s²·b (dropout)
        attention "fused" (flash attention, torch's scaled_dot_product_attention): no s² term;
            it keeps its output (the projection's input, already counted) and an fp32
            log-sum-exp per head and position                4·a·s·b

    Left out, as in the paper: per-position statistics (each LayerNorm's mean and 1/std, 2·4·s·b
    bytes in fp32 per LayerNorm) — under 1 % at any real width. Weights that autograd also holds
    on to are the model's, not the micro-batch's, and are not counted.
    """
    if precision not in _VALUE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(_VALUE_BYTES)}")
    if attention not in ATTENTION:
        raise ValueError(f"unknown attention {attention!r}; choose 'materialized' (scores kept, as in the "
                         f"paper) or 'fused' (flash attention: no s² scores)")
    if not isinstance(micro_batch, int) or micro_batch < 1:
        raise ValueError(f"micro_batch must be a whole number >= 1, got {micro_batch!r}")
    e, s, b, h, a = _VALUE_BYTES[precision], shape.seq, micro_batch, shape.hidden, shape.heads
    f_over_h = shape.inner / h                         # 4 for the usual MLP: 1 + 4 + 4 = 9 values of sbh
    values = 2 + 4 + 1 + (1 + 2 * f_over_h)
    total = values * e * s * b * h + (2 * s * b * h if dropout else 0)
    if attention == "materialized":
        total += (e + (1 + e if dropout else 0)) * a * s * s * b
    else:
        total += 4 * a * s * b
    return int(total)


def activation_bytes(shape: Transformer, micro_batch: int, precision: str = "bf16-mixed", *,
                     in_flight: int = 1, layers: int | None = None, **kwargs) -> int:
    """Activations of `layers` blocks (default: all) for `in_flight` micro-batches held at once
    (a pipeline rank under GPipe holds m of them, under 1F1B up to p). The embedding and the
    head are left out: they are a small part of a deep model."""
    n = shape.layers if layers is None else layers
    return in_flight * n * activation_bytes_per_layer(shape, micro_batch, precision, **kwargs)


def training_bytes(shape: Transformer, micro_batch: int = 1, precision: str = "bf16-mixed",
                   optimizer: str = "adam", *, in_flight: int = 1, **activation_kwargs) -> dict[str, int]:
    """Memory of training the whole model on one device, by kind (see KINDS)."""
    n, per = parameters(shape), bytes_per_parameter(precision, optimizer)
    return {"parameters": n * per.parameters, "gradients": n * per.gradients, "optimizer": n * per.optimizer,
            "activations": activation_bytes(shape, micro_batch, precision, in_flight=in_flight,
                                            **activation_kwargs)}
