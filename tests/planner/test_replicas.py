"""The replicas, the dp·cp ranks that hold the same parameters, in one place (Layout.replicas): held to the
engine's mesh (parallel/mesh.py, whose groups the real runs average gradients over), then through each
of its users by hand: the step end's gradient all-reduce and a block's ZeRO-3 collectives."""

import pytest

from minipipe.parallel.mesh import Mesh
from minipipe.planner import Layout, make_setup
from minipipe.planner.evaluate import predictor
from minipipe.planner.shapes import VALUE_BYTES, ModelShape


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


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_the_last_bucket_no_backward_hides_is_25_mib_of_gradients_or_all_of_them_when_fewer(zero):
    """step_end.reductions' tail: DDP's last bucket (25 MiB), all-reduced under ZeRO 0, reduce-scattered
    under ZeRO 1; under ZeRO 2 and 3 the reduce-scatters ran per micro-batch and no bucket is left. A
    model whose gradients fill less than one bucket reduces them all in its last."""
    from minipipe.planner.step_end import BUCKET_BYTES

    layout = Layout(2, 2, 4, 1, 8, "1f1b", 1, "none", zero=zero, cp=2)
    pred = predictor(SETUP)
    link = pred.links(2, 2, 4)["dp"]
    steps = {0: 2 * 7, 1: 7}.get(zero)
    assert BUCKET_BYTES == 25 * 2**20
    tails = [pred.pipeline(layout).reductions.per_rank[r].tail for r in range(2)]
    assert tails == [pytest.approx(ring_time(steps, BUCKET_BYTES, 8, link), rel=1e-12) if steps else 0.0] * 2
    small = make_setup(
        ModelShape("tiny", 4, 256, 4, 1000, 512), 32, "a100-80gb", batch=32, latency=1e-5, fp32_gradients=True
    )
    few = predictor(small)
    grads = [few.footprint.elements("1f1b", 2, 2, 1, r) * small.grad_bytes for r in range(2)]
    assert steps is None or max(grads) < BUCKET_BYTES  # the regime the second half needs
    tails = [few.pipeline(layout).reductions.per_rank[r].tail for r in range(2)]
    link = few.links(2, 2, 4)["dp"]
    assert tails == [pytest.approx(ring_time(steps, g, 8, link), rel=1e-12) if steps else 0.0 for g in grads]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_the_step_end_gathers_the_parameters_under_zero_1_and_2_only(zero):
    """ZeRO 1 and 2 all-gather each rank's updated shard of the parameters after the optimizer step (its
    16-bit values: 7 steps of a ring of 8); ZeRO 0 holds them whole, and ZeRO 3 gathers them per block
    in the forward, not at the step's end."""
    layout = Layout(2, 2, 4, 1, 8, "1f1b", 1, "none", zero=zero, cp=2)
    pred = predictor(SETUP)
    link = pred.links(2, 2, 4)["dp"]
    for r in range(2):
        gather = pred.pipeline(layout).reductions.per_rank[r].gather
        values = pred.footprint.elements("1f1b", 2, 2, 1, r) * 2  # 16-bit
        assert gather == (pytest.approx(ring_time(7, values, 8, link), rel=1e-9) if zero in (1, 2) else 0.0)


def test_a_mixture_of_experts_last_bucket_is_the_embeddings_reduced_over_every_replica():
    """The backward reaches the embedding last, and its gradients are the dense parameters', summed over
    all dp·cp replicas, not over the fewer that hold the same experts."""
    from minipipe.planner.step_end import BUCKET_BYTES

    setup = make_setup("mixtral-8x7b", 32, "a100-80gb", batch=32, latency=1e-5)
    layout = Layout(2, 2, 4, 1, 8, "1f1b", 1, "none", zero=0, cp=2, ep=2)
    pred = predictor(setup)
    link = pred.links(2, 2, 4)["dp"]
    assert pred.pipeline(layout).reductions.per_rank[0].tail == pytest.approx(
        ring_time(2 * 7, BUCKET_BYTES, 8, link), rel=1e-12
    )
