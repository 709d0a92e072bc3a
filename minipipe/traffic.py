"""What moves between ranks, in one vocabulary: its kinds, what a ring collective sends, what ring
attention sends, buckets, and `Traffic`, what a step moves from shapes alone (the mesh simulator
replays it).

A training step moves seven kinds of bytes, one `TrafficKind` each:

    kind            axis  how                  what
    pp activation   pp    point to point       a forward's output, to the next stage's rank
    pp gradient     pp    point to point       a backward's input gradient, to the previous stage's
    tp all-reduce   tp    ring all-reduce      Megatron's f and g inside tensor-parallel layers
    tp all-gather   tp    ring all-gather      a column-parallel output gathered whole (the MLP's layers)
    cp ring         cp    point to point,      ring attention: K and V blocks passed to the next cp
                          round a ring         rank (and dK, dV in the backward), `ring_attention_steps`
    ep all-to-all   ep    all-to-all           a mixture-of-experts layer's tokens to their experts' ranks
                                               and back (`moe_exchanges`)
    dp all-reduce   dp    ring all-reduce      the gradients averaged across replicas (dp × cp), once a step

Every part that sends, records, predicts or draws them speaks this type: the messaging and the
collectives (engine/comm.py, parallel/), the Trace (CollectiveEvent.kind, Trace.traffic), the
simulators, the byte accounting, compare.py and the charts, which give each kind one colour.

A point-to-point message counts its tensor's bytes. A collective counts what each rank sends
with a ring algorithm (`ring_bytes`): 2(n−1)/n of the buffer for an all-reduce (a reduce-scatter,
then an all-gather), (n−1)/n for an all-gather or a reduce-scatter — the usual model (NCCL's "bus
bandwidth"). An all-to-all keeps 1/n of its buffer and sends the other n − 1 parts, one to each
peer: (n−1)/n of it, in n − 1 pairwise steps, the bytes and steps of an all-gather. Gradients
are averaged in buckets (`buckets`), the last layers first. Pure arithmetic: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from .schedule.ops import OPS, Action

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")

# Gradient bytes per bucket: small, so the course's small models fill several buckets (DDP's
# default is 25 MiB, its first bucket 1 MiB). RunConfig.dp_bucket_bytes changes it per run.
DEFAULT_BUCKET_BYTES = 32 * 1024


class TrafficKind(Enum):
    """One kind of traffic: the mesh `axis` it crosses and `what` moves (for a collective, its
    name in COLLECTIVES). `str(kind)` is its label for people ('tp all-reduce'), and
    TrafficKind('tp all-reduce') reads one back. `colour` is its colour in every chart: the
    messages take the colour of the op that sends them (F blue, B orange: schedule/ops.py), the
    collectives Okabe-Ito colours no op uses, since they are drawn over the actions."""

    PP_ACTIVATION = ("pp", "activation", OPS["F"].colour)
    PP_GRADIENT = ("pp", "gradient", OPS["B"].colour)
    TP_ALL_REDUCE = ("tp", "all-reduce", "#CC79A7")  # Okabe-Ito reddish purple
    TP_ALL_GATHER = ("tp", "all-gather", "#F0E442")  # Okabe-Ito yellow
    CP_RING = ("cp", "ring", "#009E73")  # Okabe-Ito bluish green (W's: a ring step is never in a W)
    DP_ALL_REDUCE = ("dp", "all-reduce", "#56B4E9")  # Okabe-Ito sky blue
    EP_ALL_TO_ALL = ("ep", "all-to-all", "#000000")  # Okabe-Ito black: no op or kind uses it; inside actions only

    def __init__(self, axis: str, what: str, colour: str):
        self.axis, self.what, self.colour = axis, what, colour

    @property
    def label(self) -> str:
        return f"{self.axis} {self.what}"

    @property
    def is_collective(self) -> bool:
        return self.what in COLLECTIVES

    @property
    def inside_actions(self) -> bool:
        """Whether it happens inside a forward or backward (tensor parallelism's collectives, ring
        attention's steps, the experts' all-to-alls), rather than between actions (messages) or
        after them (gradients)."""
        return self.axis in ("tp", "cp", "ep")

    def __str__(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"TrafficKind.{self.name}"

    @classmethod
    def _missing_(cls, value: object) -> TrafficKind | None:
        """TrafficKind('tp all-reduce'): a kind by its label."""
        for kind in cls:
            if kind.label == value:
                return kind
        return None


def kind_of(value: TrafficKind | str) -> TrafficKind:
    """The kind itself, or the kind a label names ('tp all-reduce'); ValueError for neither."""
    # Enum's look-up by value, which mypy reads as a call of __init__'s three fields
    return TrafficKind(value)  # type: ignore[call-arg,arg-type]


KINDS: tuple[TrafficKind, ...] = tuple(TrafficKind)


def message_kind(producer: Action) -> TrafficKind:
    """The kind of the message an action's output makes: a forward's activation, a backward's
    (B or I) input gradient."""
    return TrafficKind.PP_ACTIVATION if OPS[producer.op].sends == "activation" else TrafficKind.PP_GRADIENT


def collective_name(kind: TrafficKind | str) -> str:
    """'all-reduce' for TrafficKind.TP_ALL_REDUCE (or for 'all-reduce' itself)."""
    name = kind.what if isinstance(kind, TrafficKind) else kind
    if name not in COLLECTIVES:
        raise ValueError(f"{kind!s} is not a collective; choose one of {', '.join(COLLECTIVES)}")
    return name


def ring_steps(kind: TrafficKind | str, n: int) -> int:
    """Steps of a ring collective over n ranks: 2(n−1) for an all-reduce (a reduce-scatter, then
    an all-gather), n−1 for the others (an all-to-all's n − 1 pairwise exchanges are no ring, but
    as many steps of nbytes/n). `kind`: a collective TrafficKind or a collective's name."""
    return (2 if collective_name(kind) == "all-reduce" else 1) * (n - 1)


def ring_bytes(kind: TrafficKind | str, nbytes: float, n: int) -> float:
    """Bytes each of n ranks sends in a ring collective of `nbytes` (the buffer all-reduced, the
    whole result of an all-gather, the whole input of a reduce-scatter): each step sends nbytes/n.
    Exact when the buffer divides into n equal chunks; otherwise the mean over the ranks."""
    return ring_steps(kind, n) * nbytes / n if n > 1 else 0.0


def sent_bytes(kind: TrafficKind, nbytes: float, n: int) -> float:
    """Bytes one rank sends for `nbytes` of `kind` in a group of n: a collective's ring share
    (ring_bytes), a point-to-point message's or ring attention step's own bytes."""
    return ring_bytes(kind, nbytes, n) if kind.is_collective else float(nbytes)


# -- ring attention (context parallelism): the one rule the engine, the simulator and the planner share
def ring_attention_steps(phase: str, kv_bytes: float, cp: int) -> list[float]:
    """What each step of ring attention sends, in order, for one attention layer and micro-batch,
    on each of the cp ranks of a group; `kv_bytes`: the rank's K and V blocks together (its
    b · s/cp tokens, its heads). Each step passes to the next rank of the ring and receives from
    the one before (Liu et al. 2023, "Ring Attention with Blockwise Transformers"):

        forward     cp − 1 steps, each the K and V block it holds: every query meets every block
        backward    cp − 1 steps of K, V and the dK, dV accumulated on them so far, then one of
                    dK, dV alone, home to their owner: K, V sent cp − 1 times, dK, dV cp times

    So a rank sends (cp − 1)·kv_bytes in the forward and (2cp − 1)·kv_bytes in the backward, per
    attention layer and micro-batch. Nothing on one rank."""
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase is 'forward' or 'backward', got {phase!r}")
    if cp <= 1:
        return []
    if phase == "forward":
        return [float(kv_bytes)] * (cp - 1)
    return [2.0 * kv_bytes] * (cp - 1) + [float(kv_bytes)]


# -- a mixture-of-experts layer: the one rule the engine, the simulator and the planner share
def check_routing(tokens: int, experts: int, top_k: int) -> None:
    """A ValueError unless `tokens`, `experts` and `top_k` are whole numbers >= 1, top_k at most experts."""
    for name, value in (("tokens", tokens), ("experts", experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if top_k > experts:
        raise ValueError(f"top_k={top_k} choices per token need at least as many experts, got experts={experts}")


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Slots each expert has for one group of `tokens` routed together (the tokens one rank holds
    for one micro-batch): ⌈capacity_factor · tokens · top_k / experts⌉. Switch Transformer's
    expert capacity (Fedus et al. 2021, eq. 3: tokens per batch / experts × capacity factor) for
    top_k choices per token, as GShard counts them (Lepikhin et al. 2020) and Megatron-Core's
    get_capacity(num_tokens · topk, ...) computes it. A choice past its expert's capacity is
    dropped; capacity_factor = experts / top_k drops nothing."""
    check_routing(tokens, experts, top_k)
    if not capacity_factor > 0 or capacity_factor == math.inf:
        raise ValueError(
            f"capacity_factor must be a number > 0 (1.25 is Switch Transformer's, experts/top_k drops "
            f"nothing), got {capacity_factor!r}"
        )
    return math.ceil(capacity_factor * tokens * top_k / experts)


def moe_exchanges(
    phase: str, tokens: int, experts: int, top_k: int, capacity_factor: float | None, width: int, element_size: int
) -> list[float]:
    """The buffers (bytes) one mixture-of-experts layer all-to-alls over its ep group for one
    micro-batch of `tokens` on each rank, in order. Forward: the dispatch (every expert's
    capacity slots of `width` values, to the expert's rank) and the combine (the experts' outputs
    back); backward: the combine's gradient, then the dispatch's. Every buffer is padded to
    capacity ("drop and pad": GShard; Megatron-Core's moe_pad_expert_input_to_capacity), so its
    size is the shapes', whatever the router chose: experts · capacity · width · element_size.
    Each rank sends ring_bytes(EP_ALL_TO_ALL, buffer, ep) = (ep−1)/ep of each.
    capacity_factor=None is a dropless layer (Mixtral, DeepSeek-V3; torchtitan's and
    Megatron-Core's dropless dispatchers send each chosen token alone, with uneven splits): the
    buffer is every choice's, tokens · top_k · width · element_size, what the planner prices
    when the routing is even."""
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase is 'forward' or 'backward', got {phase!r}")
    if capacity_factor is None:
        check_routing(tokens, experts, top_k)
        return [float(tokens * top_k * width * element_size)] * 2
    return [float(experts * expert_capacity(tokens, experts, top_k, capacity_factor) * width * element_size)] * 2


def buckets(
    sizes: Sequence[int], bucket_bytes: int = DEFAULT_BUCKET_BYTES, keys: Sequence[Hashable] | None = None
) -> list[list[int]]:
    """Indices into `sizes` (bytes of each gradient, in model order), bucket by bucket, as data
    parallelism sends them: from the last one backwards (backward finishes the last layers'
    gradients first, so they fill the first bucket), at most `bucket_bytes` a bucket unless one
    gradient alone is larger. `keys`: per gradient, what must be equal within a bucket (the dtype
    and device: each bucket is one flat buffer); None: all alike."""
    out: list[list[int]] = []
    size, key = 0, None
    for i in reversed(range(len(sizes))):
        k = keys[i] if keys is not None else None
        if out and k == key and size + sizes[i] <= bucket_bytes:
            out[-1].append(i)
            size += sizes[i]
        else:
            out.append([i])
            size, key = sizes[i], k
    return out


TP_OPS = {"forward": ("F",), "backward": ("B", "I")}  # which ops run a layer's collectives of each phase


@dataclass(frozen=True)
class Traffic:
    """What a step moves besides the activations between stages, from shapes alone.

    tp: per stage, {op: [(kind, nbytes), ...]}: the tensor-parallel collectives one micro-batch
        runs in that op, in order; kind a TrafficKind (TP_ALL_REDUCE, TP_ALL_GATHER; or its
        label), nbytes the whole tensor (the buffer all-reduced, the result gathered). Empty: no tp.
    cp: per stage, {op: [(kind, nbytes), ...]} likewise: ring attention's steps (CP_RING), nbytes
        what each step sends (ring_attention_steps). Empty: no cp.
    grads: per stage, the bytes of each parameter's gradient (this rank's tp shard), in model
        order. Empty: no data parallelism to simulate.
    bucket_bytes: gradient bytes per all-reduce, as RunConfig.dp_bucket_bytes.
    ep: per stage, {op: [(kind, nbytes), ...]} likewise: the mixture-of-experts layers' all-to-alls
        (EP_ALL_TO_ALL, nbytes each buffer: moe_exchanges). Empty: no ep.
    expert_grads: per stage, the bytes of each of this rank's experts' gradients, averaged over
        the edp group rather than dp × cp (they are left out of `grads`). Empty: no ep.
    """

    tp: Sequence[Mapping[str, Sequence[tuple[TrafficKind, float]]]] = ()
    grads: Sequence[Sequence[int]] = ()
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    cp: Sequence[Mapping[str, Sequence[tuple[TrafficKind, float]]]] = ()
    ep: Sequence[Mapping[str, Sequence[tuple[TrafficKind, float]]]] = ()
    expert_grads: Sequence[Sequence[int]] = ()
