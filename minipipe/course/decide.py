"""The figures of the decision makers' track (decide/*.ipynb) and its handout (decide/handout.py),
computed once here from the planner and the serving model so the notebooks and the handout agree.

    fewest_gpus("llama2-70b", "h100-sxm")           # the fewest GPUs a training layout fits on
    training_bill("llama2-70b", "a100-80gb", 1024)  # GPU-hours, days and money: best, median, slowest layout
    decode_costs("llama2-70b", "h100-sxm", tp=2)    # ServeCosts of one token step, from the planner's figures
    serving_point("llama2-70b", "h100-sxm", tp=2, pp=1, k=16)   # what a user waits, tokens/s, $ per 1M tokens

Nothing here is measured or typed: model shapes, GPU figures and efficiencies are the planner's
(planner/presets.py, planner/efficiency.py); training tokens, published GPU-hours and prices are
quoted with their sources below, and the notebooks say them.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

from ..planner.advice import fits_somehow
from ..planner.prediction import Row
from ..planner.presets import GPUS, MODELS
from ..planner.presets import gpu as gpu_named
from ..planner.presets import model as model_named
from ..planner.search import plan
from ..planner.setup_and_layout import Layout, make_setup
from ..planner.shapes import ModelShape, parameters
from ..planner.space import Space
from ..sim.request_stream import ServeCosts, Stream, simulate_serving
from .i18n import language

# -- what the planner's presets do not hold, each with its source ---------------------------------
# Training tokens of the published runs.
TOKENS = {
    "gpt3-175b": (300e9, "Brown et al. 2020 (arXiv:2005.14165), §2.2 and Table 2.2: 300 billion training tokens"),
    "llama2-7b": (2e12, "Touvron et al. 2023, Llama 2 (arXiv:2307.09288), Table 1: 2.0T tokens"),
    "llama2-70b": (2e12, "Touvron et al. 2023, Llama 2 (arXiv:2307.09288), Table 1: 2.0T tokens"),
    "llama3-405b": (15.6e12, "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), §3.1: 15.6T tokens"),
}
# GPU-hours a publication reports for its run (the planner's figure is held to them).
PUBLISHED_GPU_HOURS = {
    "llama2-7b": (184_320, "a100-80gb", "Touvron et al. 2023, Llama 2, Table 2: 184,320 GPU hours on A100-80GB"),
    "llama2-70b": (1_720_320, "a100-80gb", "Touvron et al. 2023, Llama 2, Table 2: 1,720,320 GPU hours on A100-80GB"),
}
# Example prices per GPU-hour, on demand (US dollars). Prices vary by provider, commitment and month:
# the same H100 SXM cost $2.69 to $12.29 per GPU-hour across four offers on 2026-11-09 (SPREAD).
PRICES = {
    "a100-80gb": (2.79, "Lambda, lambda.ai/instances, 8x A100 SXM 80 GB, per GPU-hour, read 2026-09-20"),
    "h100-sxm": (3.99, "Lambda, lambda.ai/instances, 8x H100 SXM, per GPU-hour, read 2026-09-20"),
    "h200": (3.99, "Hyperstack, hyperstack.cloud/gpu-pricing, H200 SXM on demand, per GPU-hour, read 2026-08-26"),
}
SPREAD = (
    2.69,
    12.29,
    "datareceipts/data-receipts, 109-gpu-pricing (read 2026-11-09): H100 SXM 80GB on demand, RunPod Community "
    "$2.69 to Azure ND96isr_H100_v5 $12.29 per GPU-hour",
)
# The batch of the GPT-3 sizes without one in the presets: Brown et al. 2020, Table 2.1 gives it in tokens
# (0.5M for 125M, 1M for 2.7B, 2M for 6.7B); here in sequences of 2048, rounded down to a power of two.
FAMILY_BATCH = {"gpt3-125m": 256, "gpt3-2.7b": 512, "gpt3-6.7b": 1024}
BF16 = 2  # bytes a served weight or cached key/value takes
MAX_GPUS = 4096


# -- the words the notebooks' outputs show, in the reader's language ---------------------------------


class Numbers(string.Formatter):
    """str.format with the language's decimal comma: 3.8 and 1,024 in English are 3,8 and 1.024 in German and
    Dutch."""

    def __init__(self, lang: str):
        self.swap = lang in ("de", "nl")

    def format_field(self, value: object, format_spec: str) -> str:
        text = super().format_field(value, format_spec)
        if self.swap and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = text.translate(str.maketrans(".,", ",."))
        return text


def say(english: str, lang: str | None = None, **values: object) -> str:
    """`english` in the track's language (decide_words.WORDS; English where it has no entry), its {fields}
    filled from `values`, numbers as the language writes them."""
    from .decide_words import WORDS

    lang = language() if lang is None else lang
    words = english if lang == "en" else WORDS[lang].get(english, english)
    return Numbers(lang).format(words, **values)


def batch_of(model: str) -> int:
    shape = MODELS[model]
    return shape.batch if shape.batch is not None else FAMILY_BATCH[model]


def fewest_gpus(model: str, gpu: str, most: int = MAX_GPUS) -> int | None:
    """The fewest GPUs on which some training layout of `model` fits in memory (the planner's
    memory model: weights, gradients, Adam, activations; any split, recomputation, ZeRO), or None
    up to `most`."""
    space, batch = Space(), batch_of(model)
    return next((n for n in range(1, most + 1) if fits_somehow(make_setup(model, n, gpu, batch=batch), space)), None)


def serving_weights(model: str | ModelShape) -> float:
    """Bytes of the weights a served model holds (bf16), the planner's parameter count."""
    return parameters(model_named(model)) * BF16


def fewest_gpus_to_serve(model: str, gpu: str) -> int:
    """The fewest GPUs whose usable memory (the planner's reserve kept free) holds the weights."""
    usable = make_setup(model, 1, gpu, batch=1).usable
    return math.ceil(serving_weights(model) / usable)


def layout_words(layout: Layout) -> str:
    """tensor × pipeline × data, as the track writes a layout (context parallelism after it, where used)."""
    words = f"{layout.tp} × {layout.pp} × {layout.dp}"
    return words + (say(" (context {cp})", cp=layout.cp) if layout.cp > 1 else "")


# -- training -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bill:
    """A training run's bill for one layout: GPU-hours, days on `gpus` GPUs, money at `price`."""

    layout: str
    step_s: float
    gpu_hours: float
    days: float
    money: float
    mfu: float


@dataclass(frozen=True)
class TrainingBill:
    """The planner's fastest layout, the median and the slowest of the ways to cut the GPUs that
    fit (each at its best micro-batch, schedule, recomputation and ZeRO stage)."""

    model: str
    gpu: str
    gpus: int
    tokens: float
    price: float
    steps: float
    best: Bill
    median: Bill
    slowest: Bill
    cuts: int


def training_bill(
    model: str, gpu: str, gpus: int, tokens: float | None = None, price: float | None = None
) -> TrainingBill:
    """What training `model` on `tokens` tokens costs on `gpus` GPUs of kind `gpu` at `price` per
    GPU-hour (defaults: TOKENS and PRICES), by the planner's step time."""
    tokens = TOKENS[model][0] if tokens is None else tokens
    price = PRICES[gpu][0] if price is None else price
    if not tokens > 0 or not price >= 0:
        raise ValueError(f"tokens must be > 0 and the price per GPU-hour >= 0; got {tokens!r} and {price!r}")
    shape = MODELS[model]
    ranked = plan(model, gpus=gpus, gpu=gpu, batch=batch_of(model), refine=3)
    cuts = ranked.distinct()
    if not cuts:
        raise ValueError(f"no layout of {shape.name} fits on {gpus} {GPUS[gpu].name}: " + " ".join(ranked.suggestions))
    steps = tokens / (batch_of(model) * shape.seq)

    def bill(row: Row) -> Bill:
        seconds = row.step * steps
        return Bill(
            layout_words(row.layout),
            row.step,
            seconds * gpus / 3600,
            seconds / 86400,
            seconds * gpus / 3600 * price,
            row.mfu,
        )

    return TrainingBill(
        model, gpu, gpus, tokens, price, steps, bill(cuts[0]), bill(cuts[len(cuts) // 2]), bill(cuts[-1]), len(cuts)
    )


# -- serving ----------------------------------------------------------------------------------------
CONTEXT = 2048  # tokens each served sequence holds in its key/value cache (an example; say it)


def kv_bytes(model: str | ModelShape, context: int = CONTEXT) -> float:
    """One sequence's key/value cache at `context` tokens, bf16: K and V of every layer."""
    s = model_named(model)
    return 2 * s.layers * s.kv * (s.hidden // s.heads) * context * BF16


def decode_costs(model: str, gpu: str, tp: int = 1, pp: int = 1, context: int = CONTEXT) -> ServeCosts:
    """One token step of a micro-batch through the whole model, as the serving model's ServeCosts (ms):
    fixed, reading the weights from memory (split over tp GPUs, read side by side); per request,
    its multiply-adds (2 FLOPs a parameter) and its key/value cache read; latency, the activation
    handed to the next pipeline stage over NVLink. Bandwidths and the matmul's fraction of peak are
    the planner's fitted efficiencies for the GPU. Tensor parallelism's all-reduces are priced by
    their bytes over NVLink (the planner prices no per-message latency)."""
    s, card = model_named(model), gpu_named(gpu)
    got = make_setup(model, tp * pp, gpu, batch=1).achieved
    bandwidth = got.bandwidth if got.bandwidth is not None else card.hbm or card.memory
    ms = 1000.0
    weights = serving_weights(s) / (tp * bandwidth) * ms
    flops = 2 * parameters(s) / (tp * got.gemm * card.peak) * ms
    cache = kv_bytes(s, context) / (tp * bandwidth) * ms
    allreduce = 2 * s.layers * 2 * (tp - 1) / tp * s.hidden * BF16 / got.nvlink * ms  # per request, 2 a layer
    hop = s.hidden * BF16 / got.nvlink * ms  # one request's activation; the serving model charges a message
    return ServeCosts(per_request=flops + cache + allreduce, fixed=weights, latency=hop)


def serving_memory(model: str, tp: int, pp: int, k: int, context: int = CONTEXT) -> float:
    """Bytes on each GPU: its share of the weights and of the caches of the p·k sequences in flight."""
    return (serving_weights(model) + pp * k * kv_bytes(model, context)) / (tp * pp)


@dataclass(frozen=True)
class ServingPoint:
    """One serving layout at k sequences per micro-batch, by the serving model."""

    model: str
    gpu: str
    tp: int
    pp: int
    k: int
    fits: bool
    token_ms: float  # what one user waits for each token: one micro-batch walking every stage
    tokens_per_s: float  # over all GPUs, the pipeline kept full
    dollars_per_million: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def label(self) -> str:
        return (
            f"TP {self.tp} × PP {self.pp}"
            if self.tp > 1 and self.pp > 1
            else (f"PP {self.pp}" if self.pp > 1 else f"TP {self.tp}" if self.tp > 1 else "1 GPU")
        )


def serving_point(
    model: str, gpu: str, tp: int, pp: int, k: int, price: float | None = None, context: int = CONTEXT
) -> ServingPoint:
    """A user's wait per token (one micro-batch alone through the pipeline) and the tokens per
    second with the pipeline full (8·p micro-batches all waiting), simulated by simulate_serving."""
    price = PRICES[gpu][0] if price is None else price
    costs = decode_costs(model, gpu, tp, pp, context)
    alone = simulate_serving(Stream(requests=k, microbatch=k), costs, p=pp)
    full = simulate_serving(Stream(requests=8 * pp * k, microbatch=k), costs, p=pp)
    usable = make_setup(model, tp * pp, gpu, batch=1).usable
    rate = full.throughput
    return ServingPoint(
        model,
        gpu,
        tp,
        pp,
        k,
        serving_memory(model, tp, pp, k, context) <= usable,
        alone.p50,
        rate,
        tp * pp * price / 3600 / rate * 1e6,
    )
