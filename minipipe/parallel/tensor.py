"""Tensor parallelism in the open: Megatron's split of each layer across the tp ranks of a group.

Pipeline parallelism cuts the model between layers; tensor parallelism cuts inside them. A
Linear y = x Aᵀ + b can be split two ways (Shoeybi et al. 2019, "Megatron-LM"):

- column-parallel: rank i keeps the rows A_i of the weight (a slice of the output features) and
  computes y_i = x A_iᵀ + b_i from the whole input x: no talk in forward, but each rank's input
  gradient A_iᵀ dy_i is only its share, and the shares must be summed (all-reduced) in backward;
- row-parallel: rank i keeps the columns of A (a slice of the input features) and computes its
  partial product x_i A_iᵀ; the partials are summed (all-reduced) in forward, and the bias added
  once, after the sum.

Column then row (fc then out of an MLP, qkv then proj of attention, split by heads) needs no talk
in between: one all-reduce in forward, one in backward per sub-block. Megatron writes the two as a
conjugate pair of autograd functions, f before the column-parallel layer and g after the
row-parallel one:

    f: forward identity,    backward all-reduce     (class CopyToTP)
    g: forward all-reduce,  backward identity       (class ReduceFromTP)

Every rank builds the whole model from the seed (as the rest of minipipe does), then keeps its
shard: `tensor_parallel(layer, tp_rank, tp_size, group)` slices a full layer's weights, so the
shards equal the unsplit model's by construction. LayerNorms, embeddings and the readout stay
replicated: each rank holds them whole, and their gradients come out equal on every rank because
f's backward hands each rank the whole input gradient.

Which layers have a tensor-parallel form is not this module's business: a model declares the
form of each of its layer types, built from the pieces here (a `TensorParallelForm` subclass,
`register_form(LayerType, Form)`), as the course's layers do in minipipe/models/layers.py. A
layer type without one stays whole on every rank.

Every collective goes through `collective()`, which tells the group's hook (kind, bytes, start,
end): the count to check `collectives()` (the same figures from shapes alone) against.
`shard_spec` says which parameters are split along which dimension, so the ranks' state_dicts
can be gathered into the full model's (`unshard_state`) and sliced again (`shard_state`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from ..traffic import TrafficKind
from .errors import collective_failed

Hook = Callable[[TrafficKind, int, float, float], None]  # (kind, bytes, start, end), times from perf_counter
TP_COLLECTIVES = (TrafficKind.TP_ALL_REDUCE, TrafficKind.TP_ALL_GATHER)


class TPGroup:
    """Where one rank's tensor-parallel collectives go: the torch group (None: the default group),
    this rank's place in it, a hook told about each collective (given where the layers are built), and the
    group's timeout in seconds, if known (a failed collective then says whether it timed out)."""

    def __init__(self, group, rank: int, size: int, hook: Hook | None = None, timeout: float | None = None):
        self.group, self.rank, self.size, self.hook, self.timeout = group, rank, size, hook, timeout

    def __repr__(self):
        return f"TPGroup(rank={self.rank}, size={self.size})"


# -- the one door every collective goes through ---------------------------------------------
def collective(kind: TrafficKind, tensor: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """TP_ALL_REDUCE: the sum of `tensor` over the group (in place); TP_ALL_GATHER: every rank's
    `tensor` side by side along the last dimension. The hook hears the bytes of the result, the
    whole activation-sized tensor in both cases (traffic.ring_bytes says what a ring algorithm
    sends). On one rank there is nothing to do and nothing to report.
    Times are the host's: with NCCL a collective is only queued when this returns."""
    if kind not in TP_COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}; this module uses {', '.join(map(str, TP_COLLECTIVES))}")
    if tp.size == 1:
        return tensor
    start, started = time.perf_counter(), time.monotonic()
    try:
        if kind is TrafficKind.TP_ALL_REDUCE:
            dist.all_reduce(tensor, group=tp.group)
            out = tensor
        else:
            parts = [torch.empty_like(tensor) for _ in range(tp.size)]
            dist.all_gather(parts, tensor, group=tp.group)
            out = torch.cat(parts, dim=-1)
    except RuntimeError as e:  # a peer hung or died: say so in minipipe's words
        raise collective_failed(f"a tensor-parallel {kind.what}", tp.group, e, started, tp.timeout) from None
    if tp.hook is not None:
        tp.hook(kind, out.numel() * out.element_size(), start, time.perf_counter())
    return out


# -- Megatron's f and g, and the gather a column-parallel layer's output may need -----------
class CopyToTP(torch.autograd.Function):
    """f: identity forward, all-reduce backward. Before a column-parallel layer: every rank reads
    the whole input, so the input's gradient is the sum of every rank's share."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        # a copy: autograd may hand the same gradient buffer to other functions too
        return collective(TrafficKind.TP_ALL_REDUCE, grad.clone(memory_format=torch.contiguous_format), ctx.tp), None


class ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward, identity backward. After a row-parallel layer: the ranks' partial
    products sum to the whole output, and each partial's gradient is the whole output's."""

    @staticmethod
    def forward(ctx, x, tp):
        # a copy: an autograd function must not change its input in place unannounced
        return collective(TrafficKind.TP_ALL_REDUCE, x.clone(memory_format=torch.contiguous_format), tp)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherFromTP(torch.autograd.Function):
    """all-gather forward (the ranks' slices of the last dimension side by side), slice backward:
    each rank keeps the gradient of its own slice, no talk."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return collective(TrafficKind.TP_ALL_GATHER, x.contiguous(), tp)

    @staticmethod
    def backward(ctx, grad):
        tp = ctx.tp
        n = grad.shape[-1] // tp.size
        return grad[..., tp.rank * n : (tp.rank + 1) * n].contiguous(), None


# -- shards of a full tensor ----------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """A parameter split across the tp ranks along `dim`. A fused tensor of `parts` equal parts
    (qkv: q|k|v) is split part by part, so each rank holds its slice of every part."""

    dim: int
    parts: int = 1


def shard(full: torch.Tensor, spec: Shard, rank: int, size: int) -> torch.Tensor:
    """This rank's slice of a full tensor (a copy, not a view of it)."""
    pieces = full.chunk(spec.parts, dim=spec.dim)
    return torch.cat([p.chunk(size, dim=spec.dim)[rank] for p in pieces], dim=spec.dim).clone()


def unshard(shards: list[torch.Tensor], spec: Shard) -> torch.Tensor:
    """The full tensor from every rank's slice, in rank order (the inverse of `shard`)."""
    per_rank = [s.chunk(spec.parts, dim=spec.dim) for s in shards]
    return torch.cat([torch.cat([r[part] for r in per_rank], dim=spec.dim) for part in range(spec.parts)], dim=spec.dim)


# -- the two parallel linears ---------------------------------------------------------------
class ColumnParallelLinear(nn.Module):
    """y_i = f(x) A_iᵀ + b_i: this rank's output features (rows of the weight, and their bias)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TPGroup, parts: int = 1):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.shards = {"weight": Shard(0, parts)} | ({} if bias is None else {"bias": Shard(0, parts)})

    def extra_repr(self):
        out, inp = self.weight.shape
        return (
            f"in_features={inp}, out_features={out} (of {out * self.tp.size}; tp rank {self.tp.rank} of {self.tp.size})"
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear, tp: TPGroup, parts: int = 1) -> ColumnParallelLinear:
        """This rank's shard of a full Linear; `parts` > 1 for fused outputs (qkv: 3)."""
        _check_divides(
            tp.size,
            linear.out_features // parts,
            f"the output features of each of the {parts} fused parts" if parts > 1 else "the output features",
        )
        spec = Shard(0, parts)
        bias = None if linear.bias is None else shard(linear.bias.detach(), spec, tp.rank, tp.size)
        return cls(shard(linear.weight.detach(), spec, tp.rank, tp.size), bias, tp, parts)

    def forward(self, x):
        return F.linear(CopyToTP.apply(x, self.tp), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = g(x_i A_iᵀ) + b: this rank's input features (columns of the weight); x_i is the
    matching slice of the input, as a column-parallel layer leaves it. The bias is whole on every
    rank and added once, after the sum."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TPGroup):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.shards = {"weight": Shard(1)}

    def extra_repr(self):
        out, inp = self.weight.shape
        return (
            f"in_features={inp} (of {inp * self.tp.size}; tp rank {self.tp.rank} of {self.tp.size}), out_features={out}"
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear, tp: TPGroup) -> RowParallelLinear:
        _check_divides(tp.size, linear.in_features, "the input features")
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(shard(linear.weight.detach(), Shard(1), tp.rank, tp.size), bias, tp)

    def forward(self, x):
        y = ReduceFromTP.apply(F.linear(x, self.weight), self.tp)
        return y if self.bias is None else y + self.bias


# -- a layer's tensor-parallel form, declared by the model that owns the layer -------------
@dataclass(frozen=True)
class Collective:
    kind: TrafficKind  # TP_ALL_REDUCE or TP_ALL_GATHER
    phase: str  # "forward" or "backward"
    nbytes: int  # the bytes of the whole result tensor, as `collective()` reports them


class TensorParallelForm(nn.Module):
    """The tensor-parallel form of one layer type: `Form(layer, tp)` holds this rank's shard of a
    full layer's weights and computes what the layer computes, talking through `collective()`
    (or the parallel linears and f, g, gather above). What the rest of minipipe asks of a form:

        shards          {parameter name: Shard}: which of the layer's parameters are split (the
                        form's state_dict has the full layer's names); the rest are replicated
        constraints     the numbers tp must divide, for the error that says which tp would work
        collectives     what one micro-batch through the layer runs on each tp rank, in order

    Register it with `register_form(LayerType, Form)`, next to the layer's own definition."""

    shards: dict[str, Shard] = {}

    @classmethod
    def constraints(cls, layer: nn.Module) -> list[tuple[int, str]]:
        """(n, what n is): tp must divide every n."""
        return []

    @classmethod
    def collectives(cls, layer: nn.Module, nbytes: int, input_grad: bool) -> list[Collective]:
        """The collectives of one micro-batch whose input (and activation) is `nbytes`, forward
        ones first; `input_grad=False` when nothing before the layer needs a gradient."""
        return []


# Exact types: a subclass may compute something else with the same weights.
FORMS: dict[type, type[TensorParallelForm]] = {}


def register_form(layer_type: type, form: type[TensorParallelForm]) -> None:
    """Split layers of exactly `layer_type` with `form` (see TensorParallelForm)."""
    if not (isinstance(form, type) and issubclass(form, TensorParallelForm)):
        raise ValueError(f"a tensor-parallel form must be a TensorParallelForm subclass, got {form!r}")
    FORMS[layer_type] = form


def has_tp_form(layer: nn.Module) -> bool:
    return type(layer) in FORMS


def tensor_parallel(
    layer: nn.Module, tp_rank: int, tp_size: int, group=None, hook: Hook | None = None, timeout: float | None = None
) -> nn.Module:
    """The tensor-parallel form of a full layer, holding this rank's shard of its weights; a
    layer with no such form (Embedding, Readout, your own) comes back unchanged, replicated.
    `group` is the tp group (e.g. make_groups(mesh).tp.group; None: the default group);
    `timeout` its timeout in seconds, as make_groups was given it."""
    check_layer(layer, tp_size)
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank must be in 0..{tp_size - 1}, got {tp_rank}")
    if type(layer) not in FORMS or tp_size == 1:
        return layer
    return FORMS[type(layer)](layer, TPGroup(group, tp_rank, tp_size, hook, timeout))


# -- what is split, and how to put it back together -----------------------------------------
def shard_spec(module: nn.Module) -> dict[str, Shard]:
    """Which parameters of a module are split, and along which dimension, by their state_dict
    names; every other parameter is replicated, whole on every tp rank. A full layer and its
    tensor-parallel form have the same names and the same spec; so do a stage of full layers
    (nn.Sequential) and the same stage made tensor-parallel."""
    spec = {}
    for prefix, m in module.named_modules():
        for name, s in getattr(FORMS.get(type(m), m), "shards", {}).items():
            spec[f"{prefix}.{name}" if prefix else name] = s
    return spec


def shard_state(full: dict[str, torch.Tensor], spec: dict[str, Shard], rank: int, size: int) -> dict:
    """A tp rank's state_dict from the full layer's (or the full model's, with a spec whose names
    carry the same prefixes)."""
    return {k: shard(v, spec[k], rank, size) if k in spec else v.clone() for k, v in full.items()}


def unshard_state(states: list[dict[str, torch.Tensor]], spec: dict[str, Shard]) -> dict:
    """The full state_dict from every tp rank's, in rank order (replicated entries from rank 0)."""
    return {k: unshard([s[k] for s in states], spec[k]) if k in spec else v.clone() for k, v in states[0].items()}


# -- the bytes, from shapes alone -----------------------------------------------------------
def collectives(
    layer: nn.Module, input_shape, tp_size: int, dtype=torch.float32, input_grad: bool = True
) -> list[Collective]:
    """The collectives one micro-batch through `layer` runs on each tp rank, in order: forward
    ones first, then backward ones. `input_shape` is the layer's input, e.g. (b, width) or
    (b, t, width). `input_grad=False` when nothing before the layer needs a gradient (the first
    layer of the first stage, fed the data): autograd may then skip a backward collective (the
    layer's form says which: TensorParallelForm.collectives)."""
    if tp_size == 1 or type(layer) not in FORMS:
        return []
    nbytes = math.prod(input_shape) * torch.empty((), dtype=dtype).element_size()
    return FORMS[type(layer)].collectives(layer, nbytes, input_grad)


# -- checks, before any process starts ------------------------------------------------------
def _check_divides(tp: int, n: int, what: str):
    if n % tp:
        raise ValueError(
            f"tp={tp} must divide {what} ({n}); choose tp from "
            f"{', '.join(str(d) for d in range(1, n + 1) if n % d == 0)}"
        )


def check_layer(layer: nn.Module, tp: int) -> None:
    """A ValueError that says what would work if `layer` cannot be split `tp` ways."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a whole number >= 1 (the number of tensor-parallel ranks), got {tp!r}")
    constraints = FORMS[type(layer)].constraints(layer) if type(layer) in FORMS else []
    for n, what in constraints:
        if n % tp:
            ok = [d for d in range(1, max(c for c, _ in constraints) + 1) if all(c % d == 0 for c, _ in constraints)]
            raise ValueError(f"tp={tp} must divide {what}, which is {n}; choose tp from {', '.join(map(str, ok))}")


def check_tensor_parallel(layers: list[nn.Module], tp: int) -> None:
    """Can this model (a list of full layers) run with `tp` tensor-parallel ranks? A ValueError
    that says what would work if not: tp must divide every split layer's widths and heads, and a
    model none of whose layers has a tensor-parallel form cannot use tp > 1."""
    for layer in layers:
        check_layer(layer, tp)
    if tp > 1 and not any(has_tp_form(layer) for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        raise ValueError(
            f"this model has no tensor-parallel form: none of its layers ({', '.join(kinds)}) is one "
            f"minipipe can split ({', '.join(t.__name__ for t in FORMS)}); run it with tp=1, build "
            f"it from those layers, or give one of its layer types a tensor-parallel form "
            f"(minipipe.parallel.tensor.register_form)"
        )
