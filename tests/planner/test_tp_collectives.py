"""A block's tensor-parallel collectives in one place (block_time.tp_collectives): held to the engine's
tensor-parallel block (parallel/tensor.py, what the real layers run), then through each of its users:
the block's time and the planner's simulated step, whose collectives are counted."""

import pytest

from minipipe.models.layers import Block, Embedding
from minipipe.parallel.tensor import collectives
from minipipe.planner import Layout, make_setup
from minipipe.planner.block_time import embedding_tp_collectives, tp_collectives
from minipipe.planner.evaluate import predictor
from minipipe.planner.simulate import simulate_layout
from minipipe.traffic import TrafficKind


@pytest.mark.parametrize("tp", [2, 4])
def test_a_blocks_collectives_are_the_engines(tp):
    calls = collectives(Block(16, 4), (2, 8, 16), tp)
    engine = tuple(
        sum(c.phase == phase and c.kind is TrafficKind.TP_ALL_REDUCE for c in calls)
        for phase in ("forward", "backward")
    )
    assert tp_collectives("none") == tp_collectives("selective") == engine
    forward, backward = tp_collectives("full")
    assert (forward, backward) == (engine[0], engine[1] + engine[0])  # the forward's again


def test_the_embeddings_collectives_are_the_engines_when_whole_and_megatrons_when_split():
    assert embedding_tp_collectives(False) == len(collectives(Embedding(16, 8, 16), (2, 8), 2)) == 0
    assert embedding_tp_collectives(True) == 1  # VocabParallelEmbedding's all-reduce of its output


# without tp_overlap: each collective its own event in the simulated step, and all of it in the block's time
SETUP = make_setup("llama2-7b", 16, "a100-80gb", batch=32, tp_overlap=False)


@pytest.mark.parametrize("recompute, backward", [("none", 2), ("full", 4)])
def test_the_block_time_counts_them(recompute, backward):
    block = predictor(SETUP).block(Layout(2, 2, 4, 1, 8, "1f1b", recompute=recompute))
    assert block.tp == pytest.approx((2 + backward) * block.tp_collective, rel=1e-12)


@pytest.mark.parametrize("recompute, backward", [("none", 2), ("full", 4)])
def test_the_simulated_step_runs_them(recompute, backward):
    layout = Layout(2, 2, 4, 1, 8, "1f1b", recompute=recompute)
    trace = simulate_layout(SETUP, layout)
    blocks = SETUP.model.layers // 2  # on pipeline rank 0
    ran = sum(c.rank == 0 and c.kind is TrafficKind.TP_ALL_REDUCE for c in trace.collectives)
    assert SETUP.vocab_parallel  # so rank 0's embedding adds one all-reduce a micro-batch
    assert ran == layout.m * (2 * blocks + 1 + backward * blocks)
