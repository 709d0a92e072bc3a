"""What the engine finds only once the model runs: a layer whose input does not fit (named, in
prepare(), before any process starts), a loss that stops being finite (the run stops at that
step and says so), and a rank that built other layers than the plan (named, before the ranks
exchange a message of the wrong size)."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from minipipe import RunConfig, run
from minipipe.engine.config import prepare
from minipipe.engine.workers import WorkerError

WIDTH = 8


def model(layers, bad_step=None):
    """A model of `layers()`; from step `bad_step` on, its data holds an infinity."""

    def make(batch_size, seed):
        def batch(step):
            x = torch.randn(batch_size, WIDTH)
            if bad_step is not None and step >= bad_step:
                x[0, 0] = math.inf
            return x, torch.sin(x)

        return SimpleNamespace(layers=layers, loss=F.mse_loss, batch=batch)

    return make


def mismatched():
    return [nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(4, WIDTH), nn.Linear(WIDTH, WIDTH)]


def wider_on_rank_1():
    import torch.distributed as dist

    extra = 8 if dist.is_initialized() and dist.get_rank() == 1 else 0  # the caller and rank 0: WIDTH
    return [nn.Linear(WIDTH, WIDTH + extra), nn.Linear(WIDTH + extra, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH)]


def base(make, **changes):
    return RunConfig(
        **{**dict(model=make, p=2, m=2, batch_size=8, steps=4, optimizer="sgd", lr=0.05, timeout=20), **changes}
    )


def test_a_layer_whose_input_does_not_fit_is_named_before_any_process_starts():
    with pytest.raises(
        ValueError,
        match=r"layer 2 \(Linear\) failed on its input of shape \(4, 8\) torch.float32, "
        r"one micro-batch: RuntimeError: mat1 and mat2 shapes cannot be multiplied"
        r".*what layer 1 gives",
    ):
        prepare(base(model(mismatched)))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_the_run_stops_at_the_first_non_finite_loss_and_says_which_step():
    with pytest.raises(
        WorkerError,
        match=r"rank 1 failed.*NonFiniteLoss: the loss is (nan|inf) at step 2, the "
        r"first that is not finite.*Lower lr",
    ) as caught:
        run(base(model(lambda: [nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH)], bad_step=2)))
    assert "Traceback" not in str(caught.value) and caught.value.rank == 1


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_rank_that_built_other_layers_is_named_not_a_gloo_abort():
    with pytest.raises(
        WorkerError,
        match=r"rank 1 failed.*DifferentModel: pipeline rank 1 built a different model "
        r"than the one the run was planned with \(0.bias is \(16,\) here, \(8,\) in "
        r"the plan.*same layers on every process",
    ) as caught:
        run(base(model(wider_on_rank_1)))
    assert caught.value.rank == 1
