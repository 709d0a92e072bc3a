"""The byte counts of traffic.py without torch: a mixture-of-experts layer's capacity and exchanges,
ring attention's steps, each against the formula its docstring cites, computed by hand, and every
count refused at its limit and accepted one step inside."""

import math

import pytest

from minipipe.traffic import expert_capacity, moe_exchanges, ring_attention_steps


def test_an_expert_holds_the_share_of_the_choices_its_capacity_factor_gives():
    # ⌈capacity_factor · tokens · top_k / experts⌉ (Switch Transformer eq. 3, top_k choices per token)
    assert expert_capacity(12, 3, 1, 1.0) == 4 and expert_capacity(12, 3, 2, 1.0) == 8
    assert expert_capacity(10, 4, 1, 1.0) == 3  # 2.5 slots round up: no choice is lost to rounding
    assert expert_capacity(12, 3, 2, 1.5) == 12 == 12 * 2 * 1.5 / 3
    assert expert_capacity(1, 1, 1, 1.0) == 1  # the smallest layer there is


@pytest.mark.parametrize("name", ["tokens", "experts", "top_k"])
def test_a_count_below_one_is_refused_by_its_name(name):
    counts = dict(tokens=2, experts=2, top_k=1)
    for bad in (0, -1, 1.0, True):
        with pytest.raises(ValueError, match=f"{name} must be a whole number >= 1, got {bad!r}"):
            expert_capacity(**(counts | {name: bad}), capacity_factor=1.0)
    assert expert_capacity(**(counts | {name: 1}), capacity_factor=1.0) >= 1


@pytest.mark.parametrize("factor", [0.0, -0.5, math.inf, math.nan])
def test_a_capacity_factor_that_gives_no_finite_room_is_refused(factor):
    with pytest.raises(ValueError, match="capacity_factor must be a number > 0"):
        expert_capacity(4, 2, 1, factor)
    assert expert_capacity(4, 2, 1, 1e-9) == 1  # just above 0: one slot


def test_an_exchange_is_every_expert_capacity_padded_or_every_choice_dropless():
    # 4 experts × ⌈1.25 · 16 · 2 / 4⌉ = 10 slots × 8 values × 2 bytes, dispatch and combine
    assert moe_exchanges("forward", 16, 4, 2, 1.25, 8, 2) == [4 * 10 * 8 * 2.0] * 2
    assert moe_exchanges("backward", 16, 4, 2, 1.25, 8, 2) == [640.0, 640.0]
    with pytest.raises(ValueError, match="phase is 'forward' or 'backward', got 'sideways'"):
        moe_exchanges("sideways", 16, 4, 2, 1.25, 8, 2)
    # dropless: 16 tokens × 2 choices × 8 values × 2 bytes, whatever the experts
    assert moe_exchanges("forward", 16, 4, 2, None, 8, 2) == [512.0] * 2
    with pytest.raises(ValueError, match="top_k=3 choices per token need at least as many experts"):
        moe_exchanges("forward", 16, 2, 3, None, 8, 2)
    with pytest.raises(ValueError, match="tokens must be a whole number >= 1"):
        moe_exchanges("forward", 0, 2, 1, None, 8, 2)


def test_ring_attention_sends_the_blocks_round_and_the_gradients_home():
    assert ring_attention_steps("forward", 100.0, 4) == [100.0] * 3  # cp − 1 steps of K, V
    assert ring_attention_steps("backward", 100.0, 4) == [200.0] * 3 + [100.0]  # then dK, dV home
    with pytest.raises(ValueError, match="phase is 'forward' or 'backward', got 'sideways'"):
        ring_attention_steps("sideways", 100.0, 4)
    assert sum(ring_attention_steps("backward", 100.0, 4)) == (2 * 4 - 1) * 100.0
    assert ring_attention_steps("backward", 100.0, 2) == [200.0, 100.0]
    assert ring_attention_steps("forward", 100.0, 1) == ring_attention_steps("backward", 100.0, 1) == []
