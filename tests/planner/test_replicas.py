"""The replicas, the dp·cp ranks that hold the same parameters, in one place (Layout.replicas): held to the
engine's mesh (parallel/mesh.py, whose groups the real runs average gradients over), then through each
of its users by hand: the step end's gradient all-reduce and a block's ZeRO-3 collectives."""

import pytest

from minipipe.parallel.mesh import Mesh
from minipipe.planner import Layout, make_setup
from minipipe.planner.evaluate import predictor
from minipipe.planner.shapes import VALUE_BYTES


@pytest.mark.parametrize("dp", [1, 2, 3, 4])
@pytest.mark.parametrize("cp", [1, 2, 3])
def test_the_replicas_are_the_meshs_dp_cp_group(dp, cp):
    mesh = Mesh(2, dp=dp, cp=cp, tp=2)
    layout = Layout(2, 2, dp, 1, 4, cp=cp)
    assert layout.replicas == mesh.size("dp_cp") == len(mesh.group(0, "dp_cp"))
    assert Layout(2, 2, dp, 1, 4, cp=cp, zero=1).zero_shards == layout.replicas
    assert layout.zero_shards == 1


def ring_time(steps: int, nbytes: float, n: int, link) -> float:
    """A ring collective by hand: `steps` steps, each a latency and 1/n of the buffer."""
    return steps * (link.latency + nbytes / n / link.bandwidth)


# 32 GPUs: tp 2 × cp 2 × pp 2 × dp 4, so 8 replicas; the dp group spans nodes (8 GPUs a node)
SETUP = make_setup("llama2-7b", 32, "a100-80gb", batch=32, latency=1e-5)


def test_the_step_ends_all_reduce_spans_every_replica():
    layout = Layout(2, 2, 4, 1, 8, "1f1b", 1, "none", zero=0, cp=2)
    pred = predictor(SETUP)
    link = pred.links(2, 2, 4)["dp"]
    grads = pred.footprint.elements("1f1b", 2, 2, 1, 0) * SETUP.grad_bytes
    reduce = pred.pipeline(layout).reductions.per_rank[0].reduce
    assert reduce == pytest.approx(ring_time(2 * 7, grads, 8, link), rel=1e-12)


def test_a_blocks_zero3_gathers_span_every_replica():
    """With ZeRO-3 on a slow network the gathers outlast the compute they hide behind, so the block's
    forward is its all-gather and its backward the all-gather and the reduce-scatter."""
    layout = Layout(2, 2, 4, 1, 8, "1f1b", 1, "none", zero=3, cp=2)
    pred = predictor(SETUP)
    link = pred.links(2, 2, 4)["dp"]
    block = pred.footprint.parameters(2, 1).block.elements
    gather = ring_time(7, block * VALUE_BYTES[SETUP.precision], 8, link)
    scatter = ring_time(7, block * SETUP.grad_bytes, 8, link)
    bt = pred.block(layout)
    assert gather > bt.compute  # the regime this test needs: nothing hides the collectives
    assert bt.forward == pytest.approx(gather, rel=1e-12)
    assert bt.backward == pytest.approx(gather + scatter, rel=1e-12)
