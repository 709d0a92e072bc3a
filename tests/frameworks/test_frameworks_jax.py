"""A GPipe in JAX (shard_map + ppermute) on host devices, with minipipe's losses."""

import pytest

from minipipe import RunConfig, make_schedule, simulate, validate
from minipipe.frameworks import jax as mj
from tests.support.frameworks import GPT, need
from tests.support.reference import reference_run

need("jax")
mj.host_devices(4)  # before JAX starts: at collection, before any test runs

# Relative, against the unsplit model, float32 on both sides (XLA's kernels are not torch's, so not
# bit for bit). Measured here over 4 steps: 2.6e-7 (p = 2 and 4); a learning rate 0.01 % off moves
# the losses by up to 2.8e-6, which this tolerance refuses.
TOLERANCE = 1e-6


def test_the_order_written_by_hand_is_gpipe_with_backwards_last_first():
    order = validate(mj.order(4, 8))
    assert simulate(order).bubble() == pytest.approx(simulate(make_schedule("gpipe", 4, 8)).bubble())
    assert [str(a) for a in order.actions[0][8:10]] == ["0B7", "0B6"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("p", [4])  # the lesson runs p=2
def test_a_jax_gpipe_trains_with_the_unsplit_losses(p):
    config = RunConfig(schedule="gpipe", p=p, m=4, model="gpt", model_args=GPT, batch_size=16, steps=4)
    run = mj.train(config)
    losses, _, _ = reference_run(config, config.steps)
    assert run.losses == pytest.approx(losses, rel=TOLERANCE)
    assert run.compile_s > 0 and len(run.step_ms) == config.steps - 1


def test_bad_input_is_refused_before_compiling():
    with pytest.raises(ValueError, match="multiple of"):
        mj.train(RunConfig(schedule="gpipe", p=3, m=3, model="gpt", model_args=GPT, batch_size=12))
    with pytest.raises(ValueError, match="gpipe"):
        mj.train(RunConfig(schedule="1f1b", p=2, m=4, model="gpt", model_args=GPT, batch_size=16))
