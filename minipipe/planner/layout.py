"""What the planner plans and what it tries: a Setup (a model, a cluster, a global batch and the
training settings) and a Layout (one way to run it), checked where they are made."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..schedule import recompute as recomputation
from ..sim.network import Link, Network
from .presets import GPU, GPUS
from .presets import gpu as gpu_named
from .presets import model as model_named
from .shapes import ModelShape, bytes_per_parameter

# The achieved fraction of peak for the compute, by GPU preset: the fraction at which this model
# reproduces a published run on that GPU (published.efficiency_for(published.RUNS[...]); which run:
# published.CALIBRATED_ON; tests/test_plan.py keeps them equal). H200: the H100's figure (the same
# chip and peak; no published H200 run is used). Any other GPU: the A100's, unless given.
DEFAULT_EFFICIENCY = {"a100-80gb": 0.501, "h100-sxm": 0.548, "h200": 0.548}

SCHEDULES = ("1f1b", "interleaved")
GiB = 2 ** 30


@dataclass(frozen=True)
class Layout:
    """One way to run: tp × pp × dp GPUs, micro-batches of `micro_batch` sequences, m of them per
    pipeline and step, `schedule` with v chunks per rank, `recompute` none | selective | full."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    m: int
    schedule: str = "1f1b"
    v: int = 1
    recompute: str = "none"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        return f"tp{self.tp} pp{self.pp} dp{self.dp}"

    def schedule_label(self) -> str:
        return self.schedule + (f" v={self.v}" if self.v > 1 else "")

    def key(self) -> tuple:
        """A total order, for ties in predicted time: fewer-way tp, then pp, larger micro-batches, ..."""
        return (self.tp, self.pp, -self.micro_batch, SCHEDULES.index(self.schedule) if self.schedule in SCHEDULES
                else len(SCHEDULES), self.v, recomputation.NAMES.index(self.recompute))


@dataclass(frozen=True)
class Setup:
    """What is planned: a model on `gpus` GPUs with a global batch of `batch` sequences.

    efficiency: achieved fraction of the GPU's peak for the compute (default DEFAULT_EFFICIENCY).
    sequence_parallel: split the norms and dropouts along the sequence over tp (Korthikanti et al.
        2022; an all-gather and a reduce-scatter replace each all-reduce, same bytes).
    distributed_optimizer: shard the optimizer state over dp (ZeRO stage 1, Megatron's
        --use-distributed-optimizer).
    dp_overlap: the gradient all-reduce starts as each rank finishes its backward (else after the
        whole pipeline).
    vocab_parallel: split the embedding and the head over tp (Megatron); False keeps them whole
        on every tp rank (minipipe's engine).
    latency: seconds per message or ring step, on both links."""

    model: ModelShape
    gpu: GPU
    gpus: int
    batch: int
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    efficiency: float | None = None
    gpus_per_node: int | None = None
    sequence_parallel: bool = True
    distributed_optimizer: bool = False
    dp_overlap: bool = True
    vocab_parallel: bool = True
    latency: float = 0.0

    @cached_property
    def achieved(self) -> float:
        if self.efficiency is not None:
            return self.efficiency
        key = next((k for k, card in GPUS.items() if card == self.gpu), None)
        return DEFAULT_EFFICIENCY.get(key, DEFAULT_EFFICIENCY["a100-80gb"])

    @property
    def node(self) -> int:
        return self.gpus_per_node or self.gpu.gpus_per_node

    @cached_property
    def network(self) -> Network:
        return Network(Link(self.gpu.nvlink, self.latency), Link(self.gpu.network, self.latency), self.node)


def make_setup(model: str | ModelShape, gpus: int, gpu: str | GPU, *, batch: int | None = None, **settings) -> Setup:
    """A Setup from names or objects, checked: a ValueError says what to change."""
    shape, card = model_named(model), gpu_named(gpu)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a whole number >= 1, got {gpus!r}")
    batch = shape.batch if batch is None else batch
    if batch is None:
        raise ValueError(f"{shape.name} has no published global batch; pass batch= (sequences per step)")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number of sequences >= 1, got {batch!r}")
    eff = settings.get("efficiency")
    if eff is not None and not 0 < eff <= 1:
        raise ValueError(f"efficiency is the achieved fraction of the GPU's peak, in (0, 1]; got {eff!r}")
    bytes_per_parameter(settings.get("precision", "bf16-mixed"), settings.get("optimizer", "adam"))   # checks both
    return Setup(shape, card, gpus, batch, **settings)
