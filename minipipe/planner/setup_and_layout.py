"""What the planner plans and what it tries: a Setup (a model, a cluster, a global batch and the
training settings) and a Layout (one way to run it), checked where they are made.

Ranks are placed as Megatron-LM places them (tensor-parallel fastest, then context-parallel, then
data-parallel, then pipeline): global rank = ((pp·dp_size + dp)·cp_size + cp)·tp_size + tp, with a
node's GPUs numbered consecutively. So a tensor-parallel group of at most a node's GPUs talks over
NVLink, and the groups with larger strides cross the network as soon as they leave a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..parallel.mesh import Mesh
from ..schedule import kinds
from ..sim import recompute_costs as recomputation
from ..sim.network import Link, Network
from .efficiency import FITTED, Achieved, Efficiency, achieved
from .moe_shape import Experts
from .presets import GPU, GPUS, MOE_MODELS
from .presets import gpu as gpu_named
from .presets import model as model_named
from .shapes import VALUE_BYTES, ModelShape, bytes_per_parameter

ZERO = (0, 1, 2, 3)
GiB = 2**30


@dataclass(frozen=True)
class Layout:
    """One way to run: tp × cp × pp × dp GPUs, micro-batches of `micro_batch` sequences, m of them
    per pipeline and step, `schedule` (a kind of minipipe.schedule.kinds) with v chunks per rank,
    `recompute` (minipipe.sim.recompute_costs: none | selective | full), `zero` the ZeRO stage over
    the data-parallel ranks (0: gradients all-reduced; 1: optimizer state sharded, Megatron's
    distributed optimizer; 2: gradients too; 3: parameters too, FSDP), `cp` context-parallel ranks
    (the sequence split over cp GPUs, attention by a ring of K and V chunks), `ep` expert-parallel
    ranks (a mixture-of-experts model's experts split over ep of the dp·cp ranks, borrowed from them
    as the engine's mesh does: parallel/mesh.py)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    m: int
    schedule: str = "1f1b"
    v: int = 1
    recompute: str = "none"
    zero: int = 0
    cp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        counts = (self.tp, self.pp, self.dp, self.micro_batch, self.m, self.v, self.cp, self.ep)
        if set(map(type, counts)) != {int} or min(counts) < 1:  # one quick look: the search makes thousands
            for name in ("tp", "pp", "dp", "micro_batch", "m", "v", "cp", "ep"):
                value = getattr(self, name)
                if type(value) is not int or value < 1:
                    raise ValueError(f"Layout {name} must be a whole number >= 1, got {value!r}")
        if type(self.zero) is not int or self.zero not in ZERO:
            raise ValueError(f"zero is a ZeRO stage, one of {', '.join(map(str, ZERO))}; got {self.zero!r}")
        if self.schedule not in kinds.KINDS:
            kinds.get(self.schedule)  # an alias is fine; anything else says what the kinds are
        if self.recompute not in recomputation.BLOCK_OPTIONS:
            recomputation.block_option(self.recompute)
        if self.ep > 1:  # the engine's rule, from the engine's mesh: ep borrowed from dp × cp
            Mesh(self.pp, dp=self.dp, cp=self.cp, ep=self.ep, tp=self.tp)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def replicas(self) -> int:
        """The dp·cp ranks that hold the same parameters (different tokens): the group that averages
        their gradients, and that ZeRO splits their state over. The one place this rule lives (the
        step's end, a block's ZeRO collectives, zero_shards)."""
        return self.dp * self.cp

    @property
    def zero_shards(self) -> int:
        """The ranks ZeRO splits the model state over: from stage 1, the replicas; 1 without ZeRO.
        The one place this rule lives (memory, the step's end, the search)."""
        return self.replicas if self.zero else 1

    @property
    def expert_shards(self) -> int:
        """The ranks ZeRO splits the experts' state over: the dp·cp/ep ranks holding the same
        experts (the edp group); 1 without ZeRO."""
        return self.dp * self.cp // self.ep if self.zero else 1

    def label(self) -> str:
        return (
            f"tp{self.tp}"
            + (f" cp{self.cp}" if self.cp > 1 else "")
            + f" pp{self.pp} dp{self.dp}"
            + (f" ep{self.ep}" if self.ep > 1 else "")
        )

    def schedule_label(self) -> str:
        return self.schedule + (f" v={self.v}" if self.v > 1 else "")

    def describe(self) -> str:
        """The whole layout in the words of --layout."""
        return (
            f"tp={self.tp},pp={self.pp},dp={self.dp},cp={self.cp},mb={self.micro_batch},m={self.m},"
            f"schedule={self.schedule},v={self.v},recompute={self.recompute},zero={self.zero}"
            + (f",ep={self.ep}" if self.ep > 1 else "")
        )

    def key(self) -> tuple[int | str, ...]:
        """A total order, for ties in predicted time: fewer-way tp, then cp, pp, larger micro-batches, ..."""
        return (
            self.tp,
            self.cp,
            self.pp,
            -self.micro_batch,
            kinds.position(self.schedule),
            self.v,
            recomputation.BLOCK_NAMES.index(self.recompute),
            self.zero,
            self.ep,
        )


@dataclass(frozen=True)
class Setup:
    """What is planned: a model on `gpus` GPUs with a global batch of `batch` sequences.

    efficiency: None (the fractions fitted on published runs for this GPU, efficiency.FITTED), an
        Efficiency, or one fraction of peak for every FLOP with no memory traffic priced (the
        simple model).
    sequence_parallel: split the norms and dropouts along the sequence over tp (Korthikanti et al.
        2022; an all-gather and a reduce-scatter replace each all-reduce, same bytes).
    dp_overlap: the gradient reduction runs bucket by bucket during each rank's last backward
        (torch DDP, Megatron's --overlap-grad-reduce); False: after the whole pipeline (Megatron
        2021's local DDP).
    tp_overlap: tensor-parallel collectives hidden behind the matmuls next to them (Megatron's
        --tp-comm-overlap); False: each action lasts its compute plus its collectives.
    vocab_parallel: split the embedding and the head over tp (Megatron); False keeps them whole
        on every tp rank (minipipe's engine).
    fp32_gradients: gradients accumulated and reduced in fp32 (Megatron's
        --accumulate-allreduce-grads-in-fp32): 4 bytes each, twice the data-parallel traffic.
    memory_reserve: the share of each GPU's memory kept free for what the model does not count
        (the CUDA context, NCCL's buffers, the allocator's fragmentation, workspaces): a layout
        fits when it needs at most (1 − memory_reserve) of the memory.
    latency: seconds per message or ring step, on both links.
    experts: the experts of a mixture-of-experts model (moe_shape.Experts). `model` is then its
        dense equivalent (dense_equivalent: each block's MLP as wide as the experts a token runs
        through), which prices the compute and activations of one token's path; footprint.py adds
        the experts it does not hold, evaluate.py the all-to-alls."""

    model: ModelShape
    gpu: GPU
    gpus: int
    batch: int
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    efficiency: float | Efficiency | None = None
    gpus_per_node: int | None = None
    sequence_parallel: bool = True
    dp_overlap: bool = True
    tp_overlap: bool = False
    vocab_parallel: bool = True
    fp32_gradients: bool = False
    memory_reserve: float = 0.1
    latency: float = 0.0
    experts: Experts | None = None  # a mixture-of-experts model's experts; `model` then its dense equivalent

    @cached_property
    def efficiencies(self) -> Efficiency:
        if isinstance(self.efficiency, Efficiency):
            return self.efficiency
        if self.efficiency is not None:
            return Efficiency(self.efficiency, None, source="given: every FLOP at this fraction of peak")
        key = next((k for k, card in GPUS.items() if card == self.gpu), "a100-80gb")
        return FITTED.get(key, FITTED["a100-80gb"])

    @cached_property
    def achieved(self) -> Achieved:
        return achieved(self.efficiencies, self.gpu)

    @property
    def node(self) -> int:
        return self.gpus_per_node if self.gpus_per_node is not None else self.gpu.gpus_per_node

    @cached_property
    def network(self) -> Network:
        return Network(Link(self.achieved.nvlink, self.latency), Link(self.achieved.network, self.latency), self.node)

    @property
    def usable(self) -> float:
        """The memory a layout may fill: all of it but the reserve."""
        return self.gpu.memory * (1 - self.memory_reserve)

    @property
    def value_bytes(self) -> int:
        return VALUE_BYTES[self.precision]

    @property
    def grad_bytes(self) -> int:
        return 4 if self.fp32_gradients else bytes_per_parameter(self.precision, self.optimizer).gradients


MAX_GPUS = 2**20


def make_setup(
    model: str | ModelShape, gpus: int, gpu: str | GPU, *, batch: int | None = None, **settings: Any
) -> Setup:
    """A Setup from names or objects, checked: a ValueError says what to change."""
    if isinstance(model, str) and model.lower() in MOE_MODELS and "experts" not in settings:
        base, preset, _ = MOE_MODELS[model.lower()]  # latent attention priced as the dense shape's (README)
        model, settings = dense_equivalent(base, preset), {**settings, "experts": preset}
    shape, card = model_named(model), gpu_named(gpu)
    given = settings.get("experts")
    if given is not None and not isinstance(given, Experts):
        raise ValueError(f"experts must be a minipipe.planner.moe_shape.Experts (or None), got {given!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise ValueError(
            f"gpus must be a whole number from 1 to {MAX_GPUS:,} (more than any cluster built; the "
            f"search's time and memory grow with the GPUs: 2^24 took a minute and 6 GB here), "
            f"got {gpus!r}"
        )
    batch = shape.batch if batch is None else batch
    if batch is None:
        raise ValueError(f"{shape.name} has no published global batch; pass batch= (sequences per step, --batch)")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number of sequences >= 1, got {batch!r}")
    eff = settings.get("efficiency")
    if eff is not None and not isinstance(eff, Efficiency) and (isinstance(eff, bool) or not 0 < eff <= 1):
        raise ValueError(f"efficiency is the achieved fraction of the GPU's peak, in (0, 1]; got {eff!r}")
    node = settings.get("gpus_per_node")
    if node is not None and (isinstance(node, bool) or not isinstance(node, int) or node < 1):
        raise ValueError(f"gpus_per_node must be a whole number >= 1 (the GPUs one node holds, e.g. 8), got {node!r}")
    reserve = settings.get("memory_reserve", 0.1)
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve < 1:
        raise ValueError(f"memory_reserve is the share of each GPU's memory kept free, in [0, 1); got {reserve!r}")
    latency = settings.get("latency", 0.0)
    if not isinstance(latency, (int, float)) or not latency >= 0:
        raise ValueError(f"latency is seconds per message or ring step, >= 0; got {latency!r}")
    bytes_per_parameter(settings.get("precision", "bf16-mixed"), settings.get("optimizer", "adam"))  # checks both
    return Setup(shape, card, gpus, batch, **settings)


def dense_equivalent(shape: ModelShape, moe: Experts) -> ModelShape:
    """A MoE model as the dense model one token runs through: each block's MLP as wide as its
    top_k routed and its shared experts together. Its FLOPs and activations per token are the MoE
    model's (dropless, evenly routed); its parameters only those one token uses."""
    return shape.with_(ffn=moe.active * moe.ffn)


def links(setup: Setup, layout: Layout) -> dict[str, Link]:
    """The link each of the layout's groups talks over (those of the first slice, as the others)."""
    tp, cp, dp = layout.tp, layout.cp, layout.dp
    net = setup.network
    return {
        "tp": net.link((0, tp - 1)),
        "cp": net.link((0, (cp - 1) * tp)),
        "dp": net.link((0, (layout.replicas - 1) * tp)),  # gradients: every replica (Layout.replicas)
        "pp": net.link((0, tp * cp * dp)),
        "ep": net.link((0, (layout.ep - 1) * tp)),  # the fastest ep of the dp·cp ranks (parallel/mesh.py)
    }
