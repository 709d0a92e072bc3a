"""Expert parallelism on real processes (gloo): a mixture-of-experts GPT with its experts split over
ep ranks gives one process's losses, gradients and weights, its routers choose and drop what one
process routing the same groups does (with context parallelism too: each cp rank routes its zig-zag share),
every all-to-all's bytes are the formula's and every one is
on the timeline, inside the forward or backward that ran it.

Each test starts its processes once and runs its layouts inside them (run_many)."""

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.traffic import TrafficKind
from tests.support.reference import assert_bytes_match_the_formulas, assert_same_math, assert_same_routing

pytestmark = pytest.mark.distributed

# 4 layers: embedding, two MoE blocks (4 experts, top 2), readout; capacity 1.0 drops choices
MOE = {
    "width": 16,
    "heads": 2,
    "depth": 2,
    "block": 8,
    "vocab": 16,
    "experts": 4,
    "top_k": 2,
    "capacity_factor": 1.0,
    "moe_every": 1,
}
STEPS = 2
EP = TrafficKind.EP_ALL_TO_ALL


def config(**kw) -> RunConfig:
    base = dict(
        model="moe",
        model_args=MOE,
        batch_size=16,
        m=2,
        steps=STEPS,
        optimizer="sgd",
        lr=0.05,
        return_grads=True,
        timeout=60,
        p=1,
    )
    return RunConfig(**{**base, **kw})


def assert_all_to_alls_inside_their_actions(result):
    """Each rank's all-to-alls: four per MoE layer and micro-batch (dispatch and combine, forward and
    backward), each inside a forward or a backward of its own rank, none in a W."""
    plan, trace = result.plan, result.traces[-1]  # pipeline 0, the last step
    for q in range(plan.schedule.p):
        moe_layers = sum(
            1 for s in plan.schedule.stages_of(q) for i in plan.partition.layers_of(s) if 1 <= i <= MOE["depth"]
        )
        swaps = [c for c in trace.collectives if c.rank == q and c.kind is EP]
        assert len(swaps) == 4 * moe_layers * plan.schedule.m, (q, len(swaps))
        spans = [e for e in trace.rank_events(q) if e.action.op in ("F", "B", "I")]
        for c in swaps:
            assert any(e.start - 1e-3 <= c.start and c.end <= e.end + 1e-3 for e in spans), (
                f"rank {q}: an all-to-all at {c.start:.3f}-{c.end:.3f} ms lies in no F, B or I of its rank"
            )


@pytest.mark.timeout(600)
def test_two_processes_experts_split_same_math_routing_and_bytes():
    configs = [
        config(dp=2, ep=2),
        config(dp=2, ep=2, model_args={**MOE, "top_k": 1}),
        config(dp=2, ep=2, schedule="zb-h1"),  # all-to-alls inside I, none in W
        config(dp=2, ep=2, schedule="dualpipe-v", m=4),  # paired F and B on the V
        config(dp=2, ep=1),
    ]  # the same experts, replicated
    results = run_many(configs)
    for result in results:
        assert_same_math(result, STEPS)
        assert assert_same_routing(result) > 0  # and choices were dropped, the same ones
        assert_bytes_match_the_formulas(result)
    for result in results[:4]:
        assert all(sent[EP] > 0 for sent in result.traffic())
        assert_all_to_alls_inside_their_actions(result)
    replicated = results[-1]
    assert all(sent.get(EP, 0) == 0 for sent in replicated.traffic())
    # the experts split or whole, the same run: expert parallelism changes where experts live, not the math
    assert results[0].losses == pytest.approx(replicated.losses, rel=1e-6)
    # split, each rank's experts are half the replicated ones: what it all-reduces shrinks by as much
    dp_split = [sent[TrafficKind.DP_ALL_REDUCE] for sent in results[0].traffic()]
    dp_whole = [sent[TrafficKind.DP_ALL_REDUCE] for sent in replicated.traffic()]
    assert all(a < b for a, b in zip(dp_split, dp_whole)), (dp_split, dp_whole)
    assert [m.parameters for m in results[0].memory] < [m.parameters for m in replicated.memory]


@pytest.mark.timeout(600)
def test_four_processes_experts_with_pipeline_tensor_and_expert_data_parallelism():
    configs = [
        config(p=2, dp=2, ep=2),
        config(p=2, dp=2, ep=2, schedule="interleaved"),
        config(dp=2, tp=2, ep=2),  # experts whole on each tp rank, attention split by heads
        config(dp=4, ep=2),  # each expert on two ranks (edp = 2): its gradients all-reduced
        config(dp=4, ep=4),
    ]  # one expert per rank
    for result in run_many(configs):
        assert_same_math(result, STEPS)
        assert assert_same_routing(result) > 0
        assert_bytes_match_the_formulas(result)
        assert_all_to_alls_inside_their_actions(result)


@pytest.mark.timeout(900)
def test_eight_processes_pp_dp_ep_tp_and_pp_cp_ep_tp_same_math():
    # four axes of the five on 8 processes each (all five > 1 take 16: pp·dp·cp·tp, ep borrowed)
    for result in run_many([config(p=2, dp=2, tp=2, ep=2), config(p=2, cp=2, tp=2, ep=2)]):
        assert result.plan.world == 8
        assert_same_math(result, STEPS)
        assert assert_same_routing(result) > 0
        assert_bytes_match_the_formulas(result)


@pytest.mark.timeout(600)
def test_experts_with_context_parallelism_route_each_ranks_share_of_the_sequence():
    configs = [
        config(p=2, cp=2, ep=2),  # ep borrowed from cp: the two halves of each sequence
        config(dp=2, cp=2, ep=4),  # from dp × cp: one expert per rank
        config(dp=2, cp=2, ep=2),
    ]  # each expert on two ranks (edp = 2)
    for result in run_many(configs):
        assert_same_math(result, STEPS)
        assert assert_same_routing(result) > 0
        assert_bytes_match_the_formulas(result)
        assert_all_to_alls_inside_their_actions(result)
