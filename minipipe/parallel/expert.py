"""Expert parallelism in the open: a mixture-of-experts layer's experts split over the ep ranks,
its tokens sent to their experts and back by all-to-all.

A mixture-of-experts (MoE) layer (models/moe.py) replaces one MLP by E experts and a router that
sends each token to its top-k of them. Every token uses only k experts' weights, so the weights
can grow E-fold for k experts' compute. Expert parallelism keeps E/ep experts on each rank of an
ep group (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021). The ranks of the
group hold different tokens (they are data- or context-parallel ranks: parallel/mesh.py borrows
ep from dp × cp), so each MoE layer runs, per micro-batch:

    route      each rank routes its own tokens: experts chosen, dropped past each expert's capacity
    dispatch   all-to-all: the slots meant for rank j's experts go to rank j (and j's come here)
    experts    each rank runs its experts on what it received, from every rank of the group
    combine    all-to-all back: every output returns to the rank its token came from

Every rank's send buffer is [ep, E/ep, capacity, width]: part j holds the capacity slots of rank
j's experts, padded with zeros where fewer tokens chose them ("drop and pad": GShard, Megatron-
Core's moe_pad_expert_input_to_capacity). So all parts are the same size, one
torch.distributed.all_to_all_single moves them with no count exchanged first (torchtitan's
dropless AllToAllTokenDispatcher exchanges counts, then sends uneven splits), and the bytes
follow from the shapes alone (traffic.moe_exchanges). gloo runs all_to_all_single on CPU (torch
2.13, checked here with even and uneven splits), so nothing needs building from send and receive.

The backward of an all-to-all is the same all-to-all of the gradients: part j of what this rank
received came from rank j, so its gradient goes back to rank j. So forward moves two buffers
(dispatch, combine) and backward two (the combine's gradient, the dispatch's).

A model declares which of its modules hold experts (`register_experts`), as it declares its
tensor-parallel forms (tensor.py): `expert_parallel(layer, ep)` splits every such module in a
layer, `expert_parameters` names the parameters that now differ between the ranks of an ep group
(their gradients are averaged over the edp group, the ranks holding the same experts, not over
dp × cp as the rest: engine/train.py).

Every all-to-all goes through `all_to_all()`, which tells the group's hook (kind, bytes, start,
end): what the engine counts and draws, to hold against the formula.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from ..traffic import TrafficKind
from .errors import collective_failed
from .mesh import check_expert_split

Hook = Callable[[TrafficKind, int, float, float], None]  # (kind, bytes, start, end), times from perf_counter


class EPGroup:
    """Where one rank's all-to-alls go: the torch group (None: the default group), this rank's
    place in it, the group's size, a hook told about each all-to-all, and the group's timeout in
    seconds (a failed all-to-all then says whether it timed out). EPGroup() is one process: every
    expert here, nothing to exchange."""

    def __init__(
        self, group=None, rank: int = 0, size: int = 1, hook: Hook | None = None, timeout: float | None = None
    ):
        self.group, self.rank, self.size, self.hook, self.timeout = group, rank, size, hook, timeout

    def __repr__(self):
        return f"EPGroup(rank={self.rank}, size={self.size})"


ONE_PROCESS = EPGroup()


# -- the one door every all-to-all goes through ----------------------------------------------
def all_to_all(tensor: torch.Tensor, ep: EPGroup) -> torch.Tensor:
    """`tensor` is [ep, ...]: part j goes to rank j of the group; returns [ep, ...] whose part j
    came from rank j. The hook hears the bytes of the whole buffer (traffic.ring_bytes says what
    a rank sends of it: (ep−1)/ep). On one rank there is nothing to do and nothing to report."""
    if ep.size == 1:
        return tensor
    if tensor.shape[0] != ep.size:
        raise ValueError(
            f"an all-to-all over {ep.size} ranks needs a buffer of {ep.size} parts along its first "
            f"dimension, got shape {tuple(tensor.shape)}"
        )
    tensor = tensor.contiguous()
    out = torch.empty_like(tensor)
    start, started = time.perf_counter(), time.monotonic()
    try:
        dist.all_to_all_single(out, tensor, group=ep.group)
    except RuntimeError as e:  # a peer hung or died: say so in minipipe's words
        raise collective_failed("an expert-parallel all-to-all", ep.group, e, started, ep.timeout) from None
    if ep.hook is not None:
        ep.hook(TrafficKind.EP_ALL_TO_ALL, tensor.numel() * tensor.element_size(), start, time.perf_counter())
    return out


class AllToAll(torch.autograd.Function):
    """all-to-all forward; the same all-to-all of the gradient backward (each part's gradient goes
    back to the rank the part came from)."""

    @staticmethod
    def forward(ctx, x, ep):
        ctx.ep = ep
        return all_to_all(x, ep)

    @staticmethod
    def backward(ctx, grad):
        return all_to_all(grad, ctx.ep), None


# -- which modules hold experts: declared by the model that owns them ------------------------
# type -> split(module, ep) -> module: keep this rank's experts, exchange tokens over `ep`. Such a
# module has `experts` (an nn.ModuleDict keyed by the expert's index, str(e)) and `n_experts`.
EXPERT_MODULES: dict[type, Callable[[nn.Module, EPGroup], nn.Module]] = {}


def register_experts(module_type: type, split: Callable[[nn.Module, EPGroup], nn.Module]) -> None:
    """Modules of exactly `module_type` hold experts; `split(module, ep)` makes one of them this
    rank's share (in place or new), with `experts` keyed by their global indices."""
    if not callable(split):
        raise ValueError(f"register_experts needs a function split(module, ep), got {split!r}")
    EXPERT_MODULES[module_type] = split


def expert_modules(module: nn.Module) -> list[nn.Module]:
    """The modules holding experts inside `module` (itself included), in module order."""
    return [m for m in module.modules() if type(m) in EXPERT_MODULES]


def has_experts(module: nn.Module) -> bool:
    return bool(expert_modules(module))


def experts_of(rank: int, experts: int, ep: int) -> range:
    """The experts rank `rank` of an ep group of `ep` holds: a contiguous E/ep of them, in order, so
    the send buffer's part j is rank j's experts."""
    per = experts // ep
    return range(rank * per, (rank + 1) * per)


def expert_parallel(layer: nn.Module, ep: EPGroup) -> nn.Module:
    """`layer` with every module holding experts split over `ep` (this rank's experts kept); a
    layer without experts comes back unchanged."""
    if ep.size == 1:
        return layer
    for name, module in list(layer.named_modules()):
        if type(module) in EXPERT_MODULES:
            check_experts(module, ep.size)
            split = EXPERT_MODULES[type(module)](module, ep)
            if name:
                parent, _, leaf = name.rpartition(".")
                setattr(layer.get_submodule(parent) if parent else layer, leaf, split)
            else:
                layer = split
    return layer


def expert_parameters(module: nn.Module) -> list[torch.Tensor]:
    """The parameters of the experts inside `module`: with ep > 1 each rank of an ep group holds
    other ones."""
    return [p for m in expert_modules(module) for p in m.experts.parameters()]


# -- checks, before any process starts -------------------------------------------------------
def check_experts(module: nn.Module, ep: int) -> None:
    check_expert_split(module.n_experts, ep, f"a {type(module).__name__} layer")


def check_expert_parallel(layers, ep: int) -> None:
    """Can these layers be split over ep expert-parallel ranks? A ValueError that says what would
    work if not: ep must divide every MoE layer's experts, and a model without one cannot use ep > 1."""
    if ep == 1:
        return
    found = [m for layer in layers for m in expert_modules(layer)]
    if not found:
        kinds = sorted({type(layer).__name__ for layer in layers})
        raise ValueError(
            f"ep={ep}: this model has no mixture-of-experts layer ({', '.join(kinds)}) whose experts "
            f"could be split; use ep=1, or a model with experts (model='moe', or your own layer "
            f"registered with minipipe.parallel.expert.register_experts)"
        )
    for m in found:
        check_experts(m, ep)
