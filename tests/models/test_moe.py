"""The mixture-of-experts layer on one process, held to a token-by-token reference written from the
papers: the router's choices, the capacity and the dropped tokens (GShard's priority), the combine,
Switch Transformer's load-balancing loss and its gradient; the routing groups of a layout."""

import math

import pytest
import torch
from torch.nn import functional as F

from minipipe.models import make_task
from minipipe.models.moe import MoE, MoEBlock, _attention, assign_slots, group_of, layout_groups, use_groups
from minipipe.traffic import expert_capacity, moe_exchanges


@pytest.fixture(autouse=True)
def one_thread():
    """Small ops: two torch threads on a busy 2-core machine made these tests 30 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def naive_moe(moe: MoE, x: torch.Tensor):
    """One group of tokens x [n, width], a token and a choice at a time: (choices, slots, out, aux).
    Switch Transformer (Fedus et al. 2021) and GShard (Lepikhin et al. 2020): softmax over the
    experts, the top k, gates renormalised for k > 1; capacity ceil(cf · n · k / E); every token's
    first choice is served before any token's second; aux = E · sum_e P_e · f_e."""
    n, E, k = x.shape[0], moe.n_experts, moe.top_k
    probs = F.softmax(x @ moe.router.gate.weight.t(), dim=-1)
    cap = math.ceil(moe.capacity_factor * n * k / E)
    choices = torch.zeros(n, k, dtype=torch.long)
    gates = torch.zeros(n, k)
    for t in range(n):
        ranked = sorted(range(E), key=lambda e: -probs[t, e].item())[:k]
        choices[t] = torch.tensor(ranked)
        chosen = torch.stack([probs[t, e] for e in ranked])
        gates[t] = chosen / chosen.sum() if k > 1 else chosen
    slots = torch.full((n, k), -1, dtype=torch.long)
    used = [0] * E
    for j in range(k):
        for t in range(n):
            e = int(choices[t, j])
            if used[e] < cap:
                slots[t, j] = used[e]
                used[e] += 1
    rows = []
    for t in range(n):
        y = torch.zeros(x.shape[1])
        for j in range(k):
            if slots[t, j] >= 0:
                y = y + gates[t, j] * moe.experts[str(int(choices[t, j]))](x[t : t + 1])[0]
        rows.append(y)
    share = torch.tensor([(choices == e).sum().item() / (n * k) for e in range(E)])
    aux = E * (probs.mean(0) * share).sum()
    return choices, slots, torch.stack(rows), aux


def recorded(moe: MoE, x: torch.Tensor):
    moe.record, moe.record_key = {}, 0
    out = moe(x)
    ((choices, slots),) = moe.record.values()
    moe.record = moe.record_key = None
    return choices, slots, out


@pytest.mark.parametrize("top_k,factor", [(1, 1.0), (2, 1.0), (2, 0.5), (1, 0.5)])
def test_the_layer_routes_drops_and_combines_as_the_papers_do(top_k, factor):
    torch.manual_seed(top_k)
    moe = MoE(8, experts=4, top_k=top_k, capacity_factor=factor, aux_loss=0.0)
    x = torch.randn(24, 8)
    choices, slots, out = recorded(moe, x)
    want_choices, want_slots, want_out, _ = naive_moe(moe, x)
    assert torch.equal(choices, want_choices)
    assert torch.equal(slots, want_slots)
    assert (slots < 0).sum() > 0, "a capacity this tight must drop some choices, or the test proves nothing"
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    dropped = (slots < 0).all(dim=1)
    assert torch.equal(out[dropped], torch.zeros_like(out[dropped]))  # a token with no kept choice: zero here


def test_capacity_at_its_limit_and_one_either_side():
    every_to_zero = torch.zeros(5, 1, dtype=torch.long)
    assert (assign_slots(every_to_zero, 3, 5) >= 0).all()  # exactly at capacity: all kept
    assert (assign_slots(every_to_zero, 3, 6) >= 0).all()
    assert assign_slots(every_to_zero, 3, 4)[:, 0].tolist() == [0, 1, 2, 3, -1]  # one over: the last dropped, once
    # GShard's priority: tokens' first choices before any second choice
    slots = assign_slots(torch.tensor([[0, 1], [1, 2]]), 3, 1)
    assert slots.tolist() == [[0, -1], [0, 0]]  # token 1's first choice (1) wins over token 0's second
    assert expert_capacity(16, 4, 2, 1.0) == 8 and expert_capacity(16, 4, 2, 1.25) == 10
    assert expert_capacity(16, 4, 2, 4 / 2) == 16  # experts/top_k: room for every token at one expert
    assert expert_capacity(1, 64, 1, 0.01) == 1


@pytest.mark.parametrize("top_k", [1, 2])
def test_capacity_factor_experts_over_k_drops_nothing(top_k):
    torch.manual_seed(3)
    moe = MoE(8, experts=4, top_k=top_k, capacity_factor=4 / top_k, aux_loss=0.0)
    with torch.no_grad():
        moe.router.gate.weight.zero_()
        moe.router.gate.weight[0] = 10.0  # every token's first choice: expert 0
    x = torch.randn(16, 8).abs()
    choices, slots, _ = recorded(moe, x)
    assert (choices[:, 0] == 0).all() and (slots >= 0).all()


def test_the_load_balancing_loss_reaches_the_router_as_if_added_to_the_loss():
    torch.manual_seed(5)
    moe = MoE(8, experts=4, top_k=2, capacity_factor=1.0, aux_loss=0.3)
    moe.loss_scale = 0.5  # a micro-batch's share, as the engine sets 1/m
    x, w = torch.randn(12, 8), torch.randn(12, 8)
    (moe(x) * w).sum().backward()
    got = {n: p.grad.clone() for n, p in moe.named_parameters()}
    moe.zero_grad()
    _, _, out, aux = naive_moe(moe, x)
    ((out * w).sum() + 0.3 * 0.5 * aux).backward()
    for name, p in moe.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert got["router.gate.weight"].abs().sum() > 0


def test_groups_route_apart_and_the_layout_groups_are_the_ranks_shares():
    torch.manual_seed(7)
    moe = MoE(8, experts=4, top_k=2, capacity_factor=0.75, aux_loss=0.0)
    x = torch.randn(4, 6, 8)
    ids = torch.tensor([[0, 0, 1, 1, 0, 1]]).repeat(4, 1) + 2 * (torch.arange(4) // 2).unsqueeze(1)
    use_groups(moe, ids)
    out = moe(x)
    use_groups(moe, None)
    for g in range(4):
        members = ids.reshape(-1) == g
        _, _, alone = recorded(moe, x.reshape(-1, 8)[members])
        torch.testing.assert_close(out.reshape(-1, 8)[members], alone)
    # the groups of a layout are what each (replica, micro-batch, cp rank) holds
    for dp, m, cp in ((1, 1, 1), (2, 2, 1), (1, 2, 2), (2, 1, 2)):
        groups = layout_groups(8, 8, dp=dp, m=m, cp=cp)
        assert groups.unique().numel() == dp * m * cp
        for d in range(dp):
            for mb in range(m):
                for c in range(cp):
                    rows = range(d * 8 // dp + mb * 8 // (dp * m), d * 8 // dp + (mb + 1) * 8 // (dp * m))
                    size = 8 // (2 * cp)
                    cols = [t for chunk in {c, 2 * cp - 1 - c} for t in range(chunk * size, (chunk + 1) * size)]
                    want = torch.zeros(8, 8, dtype=torch.bool)
                    want[torch.tensor(list(rows)).unsqueeze(1), torch.tensor(cols)] = True
                    assert torch.equal(groups == group_of(d, mb, c, m=m, cp=cp), want), (dp, m, cp, d, mb, c)


def test_the_exchanges_are_the_padded_buffers():
    moe = MoE(16, experts=4, top_k=2, capacity_factor=1.0)
    # one micro-batch of [2, 8] tokens: capacity 8, a buffer of 4 experts x 8 slots x 16 floats
    assert moe.exchanges("forward", (2, 8, 16), 4) == moe.exchanges("backward", (2, 8, 16), 4) == [2048.0, 2048.0]
    assert moe_exchanges("forward", 16, 4, 2, 1.0, 16, 4) == [2048.0] * 2
    with pytest.raises(ValueError, match="phase"):
        moe_exchanges("sideways", 16, 4, 2, 1.0, 16, 4)


def test_the_moe_gpt_is_the_gpt_with_moe_blocks_and_learns():
    task = make_task("moe", depth=4, moe_every=2)
    kinds = [type(layer).__name__ for layer in task.layers()]
    assert kinds == ["Embedding", "Block", "MoEBlock", "Block", "MoEBlock", "Readout"]
    assert [type(x).__name__ for x in make_task("moe", depth=2, moe_every=1).layers()][1:3] == ["MoEBlock"] * 2
    a, b = make_task("moe", seed=2).layers(), make_task("moe", seed=2).layers()
    assert all(torch.equal(p, q) for la, lb in zip(a, b) for p, q in zip(la.parameters(), lb.parameters()))
    torch.manual_seed(0)
    task = make_task("moe", batch_size=16, depth=2, width=32, experts=4)
    model = torch.nn.Sequential(*task.layers())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(120):
        x, y = task.batch(step)
        loss = task.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:5]) / 5  # 3.6 -> 1.0 here


@pytest.mark.parametrize(
    "args,message",
    [
        ({"top_k": 5}, "top_k=5 choices per token need at least as many experts"),
        ({"capacity_factor": 0}, "capacity_factor must be > 0"),
        ({"capacity_factor": -1.0}, "must be a number >= 0"),
        ({"aux_loss": float("nan")}, "must be a number >= 0"),
        ({"experts": 2.5}, "whole number >= 1"),
        ({"moe_every": 5}, "leaves no block"),
        ({"width": 30, "heads": 4}, "moe width must be a multiple of heads"),
    ],
)
def test_bad_moe_settings(args, message):
    with pytest.raises(ValueError, match=message):
        make_task("moe", **args)


def test_a_block_with_experts_keeps_its_residual_for_dropped_tokens():
    torch.manual_seed(1)
    block = MoEBlock(8, 2, experts=4, top_k=1, capacity_factor=0.25, aux_loss=0.0)
    x = torch.randn(2, 8, 8)
    block.moe.record, block.moe.record_key = {}, 0
    y = block(x)
    ((_, slots),) = block.moe.record.values()
    h = x + _attention(block, x, 8, 2)  # the residual stream after attention: what a dropped token leaves with
    dropped = (slots < 0).all(dim=1).reshape(2, 8)
    assert dropped.any()
    torch.testing.assert_close(y[dropped], h[dropped])
