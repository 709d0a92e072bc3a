"""Ring attention is causal attention over the whole sequence, with every block it passes counted.

No processes: the cp ranks are threads of this process, and the ring between them is a list of
slots and a barrier put where `pass_on` is (the one door every ring step goes through), so the
math is checked on its own against torch's scaled_dot_product_attention, in float64, for 1 to 4
ranks. The real ring on gloo is tests/parallel/test_context_run.py's.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch.nn import functional as F

from minipipe.parallel import ring_attention
from minipipe.parallel.context import shard_sequence, unshard_sequence, zigzag_positions
from minipipe.parallel.ring_attention import CPGroup, RingAttention, step_block
from minipipe.traffic import TrafficKind, ring_attention_steps


class ThreadRing:
    """cp ranks as threads: pass_on puts a tensor in this rank's slot and takes the one before's."""

    def __init__(self, size: int):
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=30)
        self.sent: list[list[tuple[TrafficKind, int]]] = [[] for _ in range(size)]

    def pass_on(self, tensor, cp):
        self.slots[cp.rank] = tensor.clone()
        self.barrier.wait()
        got = self.slots[(cp.rank - 1) % cp.size]
        self.barrier.wait()  # every rank has taken its block before the slots are reused
        cp.hook(TrafficKind.CP_RING, tensor.numel() * tensor.element_size(), 0.0, 0.0)
        return got


def run_ring(q, k, v, d_out, cp: int, monkeypatch):
    """Every rank's share of the output and of dq, dk, dv, put back in sequence order, and the
    bytes each rank sent, phase by phase."""
    ring = ThreadRing(cp)
    monkeypatch.setattr(ring_attention, "pass_on", ring.pass_on)
    out, errors = [None] * cp, []

    def rank(r):
        try:
            group = CPGroup(None, r, cp, hook=lambda kind, n, a, b: ring.sent[r].append((kind, n)))
            mine = [shard_sequence(t, cp, r, dim=2).clone().requires_grad_(True) for t in (q, k, v)]
            o = RingAttention.apply(*mine, group)
            forward = len(ring.sent[r])
            o.backward(shard_sequence(d_out, cp, r, dim=2))
            out[r] = (o.detach(), *(t.grad for t in mine), forward)
        except Exception as e:  # noqa: BLE001 (handed to the test below)
            errors.append(e)
            ring.barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(cp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[0]
    whole = [unshard_sequence([out[r][i] for r in range(cp)], dim=2) for i in range(4)]
    sent = [([n for _, n in ring.sent[r][: out[r][4]]], [n for _, n in ring.sent[r][out[r][4] :]]) for r in range(cp)]
    return whole, sent, ring


def inputs(cp: int, seq_per_rank: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, heads, head = 2, 3, 5
    return [torch.randn(b, heads, cp * seq_per_rank, head, generator=g, dtype=torch.float64) for _ in range(4)]


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_ring_attention_equals_attention_over_the_whole_sequence(cp, monkeypatch):
    q, k, v, d_out = inputs(cp)
    (out, dq, dk, dv), sent, _ = run_ring(q, k, v, d_out, cp, monkeypatch)
    whole = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*whole, is_causal=True)
    ref.backward(d_out)
    for name, got, want in (
        ("output", out, ref),
        ("dq", dq, whole[0].grad),
        ("dk", dk, whole[1].grad),
        ("dv", dv, whole[2].grad),
    ):
        torch.testing.assert_close(got, want.detach(), rtol=1e-10, atol=1e-12, msg=lambda m: f"cp={cp} {name}: {m}")


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_each_rank_sends_what_the_formula_says(cp, monkeypatch):
    """(cp − 1) K, V blocks forward; cp − 1 of K, V with dK, dV, then dK, dV alone, backward."""
    q, k, v, d_out = inputs(cp)
    _, sent, _ = run_ring(q, k, v, d_out, cp, monkeypatch)
    kv = 2 * q[..., : q.shape[-2] // cp, :].numel() * q.element_size()  # one rank's K and V
    for forward, backward in sent:
        assert forward == ring_attention_steps("forward", kv, cp)
        assert backward == ring_attention_steps("backward", kv, cp)
    assert sum(ring_attention_steps("forward", kv, cp)) == (cp - 1) * kv
    assert sum(ring_attention_steps("backward", kv, cp)) == ((2 * cp - 1) * kv if cp > 1 else 0)


@pytest.mark.parametrize("cp", [2, 3, 4, 5])
def test_the_steps_cover_the_causal_mask_once_and_balance_it(cp):
    """Over every rank and ring step, each (query, key) pair with key <= query is computed exactly
    once, no other pair ever, and every step after the first gives every rank the same work."""
    half = 3
    covered = torch.zeros(2 * cp * half, 2 * cp * half, dtype=torch.int64)
    for r in range(cp):
        mine = zigzag_positions(2 * cp * half, cp, r)
        for step in range(cp):
            rows, cols, causal = step_block(step, r, cp, half)
            theirs = zigzag_positions(2 * cp * half, cp, (r - step) % cp)
            qpos, kpos = mine[rows], theirs[cols]
            pairs = torch.ones(len(qpos), len(kpos), dtype=torch.int64)
            if causal:
                pairs = pairs.tril()
            covered[qpos.unsqueeze(1), kpos.unsqueeze(0)] += pairs
            if step > 0:
                assert len(qpos) * len(kpos) == 2 * half * half, (r, step)
    assert torch.equal(covered, torch.ones_like(covered).tril())


def test_the_zigzag_shares_are_an_early_and_a_late_chunk():
    assert zigzag_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert zigzag_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    shares = [zigzag_positions(24, 3, r) for r in range(3)]
    assert sorted(torch.cat(shares).tolist()) == list(range(24))
    x = torch.arange(2 * 24).reshape(2, 24)
    assert torch.equal(unshard_sequence([shard_sequence(x, 3, r) for r in range(3)]), x)
