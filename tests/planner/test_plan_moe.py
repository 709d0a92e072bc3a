"""The planner's search over expert parallelism: a mixture-of-experts layout's memory (the experts
split over ep, their state over the edp ranks), its all-to-alls (the engine's byte rule on the
ep group's link), the engine's two rules on ep, and DeepSeek-V3's published run. No processes."""

import pytest

from minipipe.cli import main
from minipipe.planner import Layout, evaluate, make_setup
from minipipe.planner.evaluate import predictor
from minipipe.planner.experts import MOE_MODELS, mlp_parameters, moe_parameters
from minipipe.planner.published import RUNS
from minipipe.planner.search import search
from minipipe.planner.space import Space
from minipipe.traffic import moe_exchanges

MIXTRAL = make_setup("mixtral-8x7b", 64, "h100-sxm", batch=512)
SHAPE, MOE, _ = MOE_MODELS["mixtral-8x7b"]
GiB = 2**30


def layout(ep=1, tp=1, pp=1, dp=64, zero=1, b=1):
    return Layout(tp, pp, dp, b, 512 // (dp * b), recompute="full", zero=zero, ep=ep)


def test_one_replica_holds_every_parameter_of_the_published_count():
    """With every expert on the rank (ep=1, tp=1, one stage), the planner's elements are Mixtral's
    46.7B parameters: the dense equivalent's plus the experts it does not hold."""
    fp = predictor(MIXTRAL).footprint
    assert fp.elements("1f1b", 1, 1, 1, 0, ep=1) == moe_parameters(SHAPE, MOE)[0]
    assert fp.elements("1f1b", 1, 1, 1, 0) == fp.elements("1f1b", 1, 1, 1, 0, ep=1)  # unless told, every expert


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_experts_are_split_over_ep_and_their_state_over_the_edp_ranks(ep):
    fp, expert = predictor(MIXTRAL).footprint, mlp_parameters(SHAPE, MOE.ffn)
    whole, split = (fp.elements("1f1b", 1, 1, 1, 0, ep=e) for e in (1, ep))
    assert whole - split == SHAPE.layers * MOE.experts * (1 - 1 / ep) * expert
    # ZeRO 1: the experts' optimizer state over dp/ep ranks, the rest over dp; per rank, in bytes
    row = evaluate(MIXTRAL, layout(ep=ep))
    routed = SHAPE.layers * MOE.experts // ep * expert
    adam_counts = 4 * predictor(MIXTRAL).footprint.parameters(1, 1).block.tensors * SHAPE.layers
    embedding_and_head = fp.parameters(1, 1).embedding.tensors + fp.parameters(1, 1).head.tensors
    expected = 12 * ((split - routed) / 64 + routed / (64 // ep)) + adam_counts + 4 * embedding_and_head
    assert row.memory["optimizer"] == pytest.approx(expected, rel=1e-12)
    assert row.memory["parameters"] == 2 * split


@pytest.mark.parametrize("ep, tp, cp", [(2, 1, 1), (8, 1, 1), (4, 2, 1), (8, 2, 1), (8, 1, 2)])
def test_the_all_to_alls_are_the_engines_byte_rule_on_the_ep_link(ep, tp, cp):
    """Each MoE block, per micro-batch: the dispatch and combine forward and their gradients
    backward (traffic.moe_exchanges, the rule the engine's measured bytes are held to in
    tests/parallel), each a ring of ep − 1 steps of buffer/ep over the ep group's link."""
    b, dp = 2, 64 // (tp * cp)
    lay = Layout(tp, 1, dp, b, 512 // (dp * b), recompute="full", zero=1, cp=cp, ep=ep)
    p = predictor(MIXTRAL)
    tokens = b * SHAPE.seq // cp
    buffer = tokens * MOE.top_k * SHAPE.hidden * 2  # bf16, dropless: every choice's row
    assert moe_exchanges("forward", tokens, MOE.experts, MOE.top_k, None, SHAPE.hidden, 2) == [buffer] * 2
    net = MIXTRAL.network
    link = net.between if (ep - 1) * tp >= MIXTRAL.node else net.inside  # the ep group spans (ep−1)·tp ranks
    by_hand = 2 * (ep - 1) * (link.latency + buffer / ep / link.bandwidth)
    assert p.experts_time(lay) == pytest.approx((by_hand, by_hand), rel=1e-12)
    row = evaluate(MIXTRAL, lay)
    assert row.comm["ep"] == pytest.approx(lay.m * SHAPE.layers * 2 * by_hand, rel=1e-12)
    without = evaluate(MIXTRAL, Layout(tp, 1, dp, b, lay.m, recompute="full", zero=1, cp=cp))
    assert row.compute == pytest.approx(without.compute, rel=1e-12)  # the experts' work is the same
    moe_block, dense_block = p.block(lay), p.block(without.layout)  # each action lasts its all-to-alls more
    assert moe_block.forward - dense_block.forward == pytest.approx(by_hand, rel=1e-9)
    assert moe_block.backward - dense_block.backward == pytest.approx(by_hand, rel=1e-9)


def test_ep_is_refused_at_the_engines_limits():
    evaluate(MIXTRAL, layout(ep=8, dp=64))  # ep = the experts
    with pytest.raises(
        ValueError, match="ep=16 does not divide the 8 experts of Mixtral 8x7B.*choose ep from 1, 2, 4, 8"
    ):
        evaluate(MIXTRAL, layout(ep=16, dp=64))  # twice the experts: fits dp, not the experts
    nine = make_setup("mixtral-8x7b", 72, "h100-sxm", batch=576)
    with pytest.raises(ValueError, match="ep=9 does not divide the 8 experts"):
        evaluate(nine, Layout(1, 1, 72, 1, 8, recompute="full", ep=9))  # the experts + 1
    six = make_setup("mixtral-8x7b", 48, "h100-sxm", batch=480)
    with pytest.raises(ValueError, match="ep=3 does not divide the 8 experts"):
        evaluate(six, Layout(1, 1, 48, 1, 10, recompute="full", ep=3))  # divides dp, not the experts
    with pytest.raises(ValueError, match=r"ep=16 must divide dp·cp = 8·1 = 8"):
        Layout(1, 8, 8, 1, 64, ep=16)  # the mesh's rule: ep borrowed from dp × cp
    with pytest.raises(ValueError, match="Llama 2 7B has none"):
        evaluate(make_setup("llama2-7b", 8, "h100-sxm"), Layout(1, 1, 8, 1, 128, ep=2))


def test_the_search_tries_ep_and_plan_takes_it(capsys):
    space = Space(("1f1b",), ("full",), (1,), micro_batches=(1,))
    every = search(MIXTRAL, space, refine=0)
    assert {r.layout.ep for r in every.rows} == {1, 2, 4, 8}
    only = search(MIXTRAL, Space(("1f1b",), ("full",), (1,), micro_batches=(1,), ep=(4,)), refine=0)
    assert only.rows and {r.layout.ep for r in only.rows} == {4}
    assert main(["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-sxm", "--batch", "512",
                 "--ep", "8", "--top", "2", "--refine", "0"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert " ep8 " in out and "ep s" in out and "DualPipe's overlap is not priced" in out
    for ep, said in (("3", "ep=3 does not divide the 8 experts"), ("9", "ep=9 does not divide the 8 experts")):
        assert main(["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--batch", "512", "--ep", ep]) == 2
        assert said in capsys.readouterr().err
    assert main(["plan", "--model", "llama2-7b", "--gpus", "64", "--ep", "2"]) == 2
    assert "has none" in capsys.readouterr().err


# -- DeepSeek-V3: the published MoE run, and how far the planner is from it --------------------
STATED = (-0.80, -0.70)  # README's planner section: the planner predicts about 75 % too little


def test_deepseek_v3s_published_layout_fits_and_is_off_by_the_stated_error():
    run = RUNS["deepseek-v3@2048xh800"]
    assert run.tflops == pytest.approx(381.7, abs=0.1)  # 1,543 tokens/s/GPU × the dense equivalent's FLOPs
    row = run.predict()
    lay = row.layout
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.zero) == (1, 16, 128, 64, 1) and row.fits
    error = run.predicted_tflops(row=row) / run.tflops - 1
    assert STATED[0] < error < STATED[1], f"{error:+.1%}"
    # why: the all-to-alls, priced exposed and at NCCL's ring pace over InfiniBand, are most of the
    # step; without them the rest of the step is within a third of the published pace
    assert row.comm["ep"] > 0.6 * row.step
    rest = row.step - row.comm["ep"]
    assert abs(row.step / rest * (1 + error) - 1) < 0.3


def test_zero_3_gathers_a_whole_moe_block_with_the_experts_a_rank_holds():
    """FSDP gathers a block's parameters before its forward: for a MoE block, its router and the
    experts/ep experts of the rank, not the dense equivalent's top_k."""
    fp, expert = predictor(MIXTRAL).footprint, mlp_parameters(SHAPE, MOE.ffn)
    for ep in (1, 8):
        elements = fp.elements("1f1b", 1, 1, 1, 0, ep=ep)
        routed = fp.expert_share("1f1b", 1, 1, 1, 0, ep=ep)
        params = fp.state("1f1b", 1, 1, 1, 64, 3, 0, ep=ep, expert_shards=64 // ep).parameters
        block = (
            elements / SHAPE.layers
            - (fp.parameters(1, 1).embedding.elements + fp.parameters(1, 1).head.elements) / SHAPE.layers
        )
        assert block == pytest.approx(
            fp.parameters(1, 1).block.elements + MOE.experts * SHAPE.hidden + (MOE.experts // ep - MOE.top_k) * expert
        )
        sharded = (elements - routed) / 64 + routed / (64 // ep)
        assert params == pytest.approx(2 * sharded + 2 * 2 * block, rel=1e-12)


def test_the_fullest_gpu_is_found_past_deepseeks_dense_blocks():
    """DeepSeek-V3's first three blocks are dense: on 32 stages of two blocks the first rank holds
    two dense blocks, the second two MoE blocks with every expert (ep=1). The planner's memory is
    the fullest rank's, as every rank's footprint says."""
    setup = make_setup("deepseek-v3", 2048, "h800", batch=15360)
    lay = Layout(2, 32, 32, 1, 480, "1f1b", recompute="none", zero=1)
    fp = predictor(setup).footprint
    every = [sum(fp.of_rank(lay, r).values()) for r in range(lay.pp)]
    row = evaluate(setup, lay)
    assert row.total_memory == pytest.approx(max(every), rel=1e-12) and row.memory_rank == every.index(max(every))
    assert row.memory_rank != 0


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_and_3_hold_one_dense_block_whole_on_a_rank_without_moe_blocks(zero):
    """ZeRO 2 keeps one block's gradients whole before its reduce-scatter, ZeRO 3 two blocks' parameters
    gathered: on DeepSeek-V3's first rank (of 32 stages: two of its three dense blocks) a dense block, on the
    second (the third dense block and a MoE block) a MoE block with the experts the rank holds."""
    setup = make_setup("deepseek-v3", 2048, "h800", batch=15360, fp32_gradients=True)  # gradients apart from values
    fp = predictor(setup).footprint
    assert [fp.moe_blocks("1f1b", 32, 1, r) for r in (0, 1)] == [0, 1]
    dense = fp.parameters(2, 32).block.elements
    for r, whole in ((0, dense), (1, dense + fp.expert_elements(2, 1)[0])):
        elements, routed = fp.elements("1f1b", 2, 32, 1, r), fp.expert_share("1f1b", 2, 32, 1, r)
        sharded = (elements - routed) / 32 + routed / 32
        state = fp.state("1f1b", 2, 32, 1, 32, zero, r, expert_shards=32)
        assert state.gradients == pytest.approx((sharded + whole) * setup.grad_bytes, rel=1e-12)
        if zero == 3:
            assert state.parameters == pytest.approx(
                sharded * fp.per.parameters + 2 * whole * setup.value_bytes, rel=1e-12
            )
