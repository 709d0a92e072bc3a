"""A mixture of experts in the course GPT: a router, E experts, a capacity, dropped tokens.

A `MoEBlock` is the GPT's Block with its MLP replaced by a `MoE` layer (Shazeer et al. 2017;
GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021): E expert MLPs and a router,
a Linear from the width to E scores. For each token:

    route    softmax over the E scores; the top-k experts (k = 1: Switch, k = 2: GShard, Mixtral),
             their probabilities its gates (for k > 1 renormalised to sum to 1, as GShard and
             Mixtral do; for k = 1 the probability itself, so the router still learns)
    capacity each expert takes at most ⌈capacity_factor · tokens · k / E⌉ of a group's choices
             (traffic.expert_capacity). A choice beyond that is dropped: that expert does not see
             the token, and a token all of whose choices are dropped passes the layer unchanged
             (the block's residual carries it). Which choices go first is GShard's rule: every
             token's first choice before any token's second, tokens in order within a choice
    combine  the token's output is the gates' weighted sum of its kept experts' outputs

A group is the tokens routed together, and capacity is per group: the tokens one rank holds for one
micro-batch, as Megatron-Core computes it (per core in Switch Transformer). So dropping depends on
how data and context parallelism and the micro-batches cut the batch, and never on pipeline,
tensor or expert parallelism. `MoE.groups` makes one process route a batch in the groups a layout
would (`layout_groups`): the reference a split run is held to.

The auxiliary load-balancing loss (Switch Transformer eq. 4, as Megatron-Core's
switch_load_balancing_loss_func counts top-k): aux = E · Σ_e P_e · f_e per group, P_e the mean
router probability of expert e, f_e the share of the group's k·tokens choices that picked it
(before dropping), weighted by `aux_loss` (Switch's α = 0.01). It is not added to the loss the run
reports: as Megatron-Core's MoEAuxLossAutoScaler does, `AddAuxLoss` hands its gradient to the
router in the backward, from inside the layer, so that it reaches the weights wherever in a
pipeline the layer sits. Its weight per call is aux_loss · loss_scale, averaged over the call's
groups; the engine sets loss_scale = 1/m, as a stage divides its loss by m.

The experts' buffers are padded to capacity, [E, capacity, width], in the experts' order; expert
parallelism (parallel/expert.py) sends part j of it to rank j, which holds experts j·E/ep ... .
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ..parallel.context import register_cp_form
from ..parallel.expert import ONE_PROCESS, AllToAll, EPGroup, experts_of, register_experts
from ..parallel.tensor import (
    Collective,
    ColumnParallelLinear,
    RowParallelLinear,
    Shard,
    TensorParallelForm,
    TPGroup,
    register_form,
)
from ..traffic import TrafficKind, expert_capacity, moe_exchanges
from .layers import causal_attention, kv_bytes, ring_attention


class Router(nn.Module):
    """A token's scores for the E experts, their softmax, its top-k choices and their gates."""

    def __init__(self, width: int, experts: int, top_k: int):
        super().__init__()
        self.gate = nn.Linear(width, experts, bias=False)
        self.top_k = top_k

    def forward(self, x):
        """x: [n, width] -> probs [n, E], choices [n, k] (best first), gates [n, k]."""
        probs = F.softmax(self.gate(x), dim=-1)
        gates, choices = probs.topk(self.top_k, dim=-1)
        if self.top_k > 1:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return probs, choices, gates


def assign_slots(choices: torch.Tensor, experts: int, capacity: int) -> torch.Tensor:
    """Each choice's slot in its expert's buffer, -1 where dropped: choices [n, k] -> slots [n, k].
    GShard's priority: all first choices, tokens in order, then all second choices."""
    n, k = choices.shape
    order = choices.t().reshape(-1)  # choice-major
    hits = F.one_hot(order, experts)  # [k·n, E]
    place = (hits.cumsum(0) * hits).sum(1) - 1  # how many choices of that expert came before
    return torch.where(place < capacity, place, -1).view(k, n).t()


class Expert(nn.Module):
    """One expert: the GPT block's MLP, width -> hidden -> width."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc = nn.Linear(width, hidden)
        self.out = nn.Linear(hidden, width)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class AddAuxLoss(torch.autograd.Function):
    """Forward: `y` unchanged. Backward: `y`'s gradient, and the gradient `weight` for `aux`, as if
    weight · aux had been added to the loss (Megatron-Core's MoEAuxLossAutoScaler)."""

    @staticmethod
    def forward(ctx, y, aux, weight):
        ctx.save_for_backward(aux)
        ctx.weight = weight
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.weight), None


class MoE(nn.Module):
    """E experts behind a router: see the module docstring. `ep` is where its experts live
    (ONE_PROCESS: all of them here); `experts` holds this process's, keyed by their index."""

    def __init__(
        self,
        width: int,
        experts: int,
        top_k: int = 2,
        capacity_factor: float = 1.25,
        aux_loss: float = 0.01,
        hidden: int | None = None,
    ):
        super().__init__()
        expert_capacity(1, experts, top_k, capacity_factor)  # the same checks, before any weight
        self.n_experts, self.top_k, self.capacity_factor, self.aux_loss = experts, top_k, capacity_factor, aux_loss
        self.router = Router(width, experts, top_k)
        self.experts = nn.ModuleDict({str(e): Expert(width, hidden or 4 * width) for e in range(experts)})
        self.ep: EPGroup = ONE_PROCESS
        self.groups: torch.Tensor | None = None  # the routing group of each token ([b, t]); None: all one
        self.loss_scale = 1.0
        self.record: dict | None = None  # {(key, group): (choices, slots)} while recording
        self.record_key = None

    def extra_repr(self):
        held = f", holds {len(self.experts)} (ep rank {self.ep.rank} of {self.ep.size})" if self.ep.size > 1 else ""
        return (
            f"experts={self.n_experts}, top_k={self.top_k}, capacity_factor={self.capacity_factor:g}, "
            f"aux_loss={self.aux_loss:g}{held}"
        )

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        if self.groups is None:
            out, aux = self._route(tokens, 0)
            auxes = [aux]
        else:
            ids = self.groups.reshape(-1).to(tokens.device)
            if ids.numel() != tokens.shape[0]:
                raise ValueError(
                    f"MoE.groups names {ids.numel()} tokens' groups, the input has {tokens.shape[0]} tokens"
                )
            out, auxes = tokens.new_zeros(tokens.shape), []
            for g in ids.unique().tolist():
                members = (ids == g).nonzero().squeeze(1)
                y, aux = self._route(tokens[members], g)
                out = out.index_copy(0, members, y)
                auxes.append(aux)
        if self.training and self.aux_loss and torch.is_grad_enabled():
            out = AddAuxLoss.apply(out, torch.stack(auxes).mean(), self.aux_loss * self.loss_scale)
        return out.view(shape)

    def _route(self, tokens, group: int):
        """One group: route, dispatch, run the experts, combine. Returns (outputs, aux)."""
        n, width = tokens.shape
        E, k = self.n_experts, self.top_k
        probs, choices, gates = self.router(tokens)
        cap = expert_capacity(n, E, k, self.capacity_factor)
        slots = assign_slots(choices, E, cap)
        if self.record is not None and self.record_key is not None:
            self.record.setdefault((self.record_key, group), (choices.detach().clone(), slots.detach().clone()))
        kept = slots >= 0
        where = (choices * cap + slots)[kept]  # each kept choice's row in [E·cap]
        token = torch.arange(n, device=tokens.device).unsqueeze(1).expand(n, k)[kept]
        buffer = tokens.new_zeros(E * cap, width).index_copy(0, where, tokens[token])
        done = self._experts(buffer.view(E, cap, width)).reshape(E * cap, width)
        out = tokens.new_zeros(n, width).index_add(0, token, done[where] * gates[kept].unsqueeze(1))
        picked = F.one_hot(choices, E).sum(dim=(0, 1)).to(probs.dtype) / (n * k)
        return out, E * (probs.mean(dim=0) * picked).sum()

    def _experts(self, buffer):
        """[E, cap, width] in the experts' order -> their outputs, the same shape. With ep ranks, part
        j goes to rank j (dispatch), each rank runs its experts on every rank's slots for them, and
        the outputs come back (combine)."""
        E, cap, width = buffer.shape
        ep, local = self.ep, self.n_experts // self.ep.size
        received = AllToAll.apply(buffer.view(ep.size, local, cap, width), ep)  # [from rank, expert, slot, width]
        mine = experts_of(ep.rank, self.n_experts, ep.size)
        outs = [
            self.experts[str(e)](received[:, i].reshape(-1, width)).view(ep.size, cap, width)
            for i, e in enumerate(mine)
        ]
        return AllToAll.apply(torch.stack(outs, dim=1), ep).view(E, cap, width)

    def exchanges(self, phase: str, input_shape, element_size: int) -> list[float]:
        """The all-to-all buffers (bytes) one micro-batch of `input_shape` runs in `phase` on each
        rank of the ep group (traffic.moe_exchanges, the formula the simulator and the planner use)."""
        *lead, width = input_shape
        tokens = 1
        for d in lead:
            tokens *= d
        return moe_exchanges(phase, tokens, self.n_experts, self.top_k, self.capacity_factor, width, element_size)


def split_experts(moe: MoE, ep: EPGroup) -> MoE:
    """This ep rank's share of a full MoE layer: its E/ep experts (the full layer's weights), the
    router whole, the all-to-alls on `ep`."""
    mine = {str(e) for e in experts_of(ep.rank, moe.n_experts, ep.size)}
    moe.experts = nn.ModuleDict({e: x for e, x in moe.experts.items() if e in mine})
    moe.ep = ep
    return moe


register_experts(MoE, split_experts)


def _attention(block, x, width: int, heads: int):
    """Causal self-attention of [b, t, ·] over `heads` heads of `width` channels together."""
    b, t, _ = x.shape
    q, k, v = block.qkv(block.ln1(x)).split(width, dim=2)
    q, k, v = (z.view(b, t, heads, width // heads).transpose(1, 2) for z in (q, k, v))
    y = block.attend(q, k, v)
    return block.proj(y.transpose(1, 2).reshape(b, t, width))


class MoEBlock(nn.Module):
    """A pre-norm transformer block whose MLP is a mixture of experts: causal self-attention, then
    the MoE layer, each with a residual."""

    def __init__(
        self,
        width: int,
        heads: int,
        experts: int,
        top_k: int = 2,
        capacity_factor: float = 1.25,
        aux_loss: float = 0.01,
    ):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.moe = MoE(width, experts, top_k, capacity_factor, aux_loss)
        self.attend = causal_attention  # context parallelism puts ring attention here (layers.ring_attention)

    def forward(self, x):
        x = x + _attention(self, x, x.shape[-1], self.heads)
        return x + self.moe(self.ln2(x))


class TensorParallelMoEBlock(TensorParallelForm):
    """An MoE block with heads/tp heads per rank (attention split as TensorParallelBlock splits it:
    f, qkv column-parallel, proj row-parallel, g) and the MoE layer whole on every tp rank: its
    input is whole there after g, so each tp rank routes the same tokens and runs the same experts
    (Megatron-Core splits the tokens over tp first, sequence parallelism, which the course's
    tensor parallelism does not do). One all-reduce of [b, t, width] in forward, one in backward."""

    shards = {"qkv.weight": Shard(0, 3), "qkv.bias": Shard(0, 3), "proj.weight": Shard(1)}

    def __init__(self, block: MoEBlock, tp: TPGroup):
        super().__init__()
        self.tp = tp
        self.heads = block.heads // tp.size
        self.width = block.qkv.in_features // tp.size
        self.ln1 = copy.deepcopy(block.ln1)
        self.qkv = ColumnParallelLinear.from_linear(block.qkv, tp, parts=3)
        self.proj = RowParallelLinear.from_linear(block.proj, tp)
        self.ln2 = copy.deepcopy(block.ln2)
        self.moe = block.moe
        self.attend = block.attend

    def forward(self, x):
        x = x + _attention(self, x, self.width, self.heads)
        return x + self.moe(self.ln2(x))

    @classmethod
    def constraints(cls, layer: MoEBlock) -> list[tuple[int, str]]:
        return [
            (layer.heads, "the MoE block's heads (attention is split by heads)"),
            (layer.qkv.in_features, "the MoE block's width"),
        ]

    @classmethod
    def collectives(cls, layer: MoEBlock, nbytes: int, input_grad: bool) -> list[Collective]:
        # attention's g; in backward attention's f, which ln1's weights need whatever the input needs
        return [
            Collective(TrafficKind.TP_ALL_REDUCE, "forward", nbytes),
            Collective(TrafficKind.TP_ALL_REDUCE, "backward", nbytes),
        ]


register_form(MoEBlock, TensorParallelMoEBlock)
# context parallelism: the attention round the cp ring, as the GPT block's; the MoE layer works
# token by token, and routes each cp rank's tokens as its own group (layout_groups)
register_cp_form(MoEBlock, ring_attention, kv_bytes)
register_cp_form(TensorParallelMoEBlock, ring_attention)


# -- the routing groups of a layout, for one process -----------------------------------------
def layout_groups(batch: int, seq: int, *, dp: int = 1, m: int = 1, cp: int = 1) -> torch.Tensor:
    """[batch, seq]: the routing group of each token of a global batch when dp replicas each take
    batch/dp of its rows, split into m micro-batches, and cp ranks each take their zig-zag share
    of every sequence (chunks c and 2cp−1−c of 2cp, parallel/context.py): group
    (replica · m + micro-batch) · cp + cp rank. Set it as every MoE layer's `groups` (use_groups)
    and one process routes the batch as that layout's ranks do."""
    if batch % (dp * m):
        raise ValueError(f"a batch of {batch} rows does not split into dp={dp} replicas of m={m} micro-batches")
    if seq % (2 * cp) and cp > 1:
        raise ValueError(f"a sequence of {seq} does not split into the 2·cp = {2 * cp} chunks of a zig-zag")
    row = torch.arange(batch)
    replica, mb = row // (batch // dp), (row % (batch // dp)) // (batch // (dp * m))
    chunk = torch.arange(seq) // (seq // (2 * cp)) if cp > 1 else torch.zeros(seq, dtype=torch.long)
    share = torch.where(chunk < cp, chunk, 2 * cp - 1 - chunk)
    return ((replica * m + mb) * cp).unsqueeze(1) + share.unsqueeze(0)


def group_of(replica: int, microbatch: int, cp_rank: int, *, m: int, cp: int) -> int:
    """The group id layout_groups gives the tokens of (dp replica, micro-batch, cp rank)."""
    return (replica * m + microbatch) * cp + cp_rank


def moe_layers(module: nn.Module) -> list[MoE]:
    return [x for x in module.modules() if isinstance(x, MoE)]


def use_groups(module: nn.Module, groups: torch.Tensor | None) -> None:
    """Route every MoE layer of `module` in these groups (None: all of a call's tokens as one)."""
    for moe in moe_layers(module):
        moe.groups = groups
