"""Activation recomputation: the same gradients as keeping everything, less kept between forward and
backward, one forward more in each backward — measured on the stages and predicted by the cost model."""

import pytest
import torch
from torch import nn

from minipipe import RunConfig, make_schedule
from minipipe.course.recompute_measured import stage_bytes
from minipipe.engine.config import prepare
from minipipe.engine.recomputing_stage import RecomputingStage, runs_of
from minipipe.engine.stage import HeldBytes, Stage
from minipipe.models import make_task
from minipipe.sim.costs import Costs
from minipipe.sim.pipeline import simulate
from minipipe.sim.recompute_costs import Recompute, backward_cost, parse

MODELS = {"mlp": {"width": 16, "depth": 6}, "gpt": {"width": 16, "heads": 2, "depth": 3, "block": 8, "vocab": 16}}


def one_stage(task, option, split, m=3):
    """The whole model as one stage, m micro-batches forward then backward (B, or I and W)."""
    layers = task.layers()
    module, held = nn.Sequential(*layers), HeldBytes()
    rc = parse(option, len(layers))
    if rc.on:
        stage = RecomputingStage(
            0,
            module,
            1,
            m,
            task.loss,
            split,
            held,
            flags=rc.of_stage(range(len(layers))),
            per_layer=rc.mode == "layers",
        )
    else:
        stage = Stage(0, module, 1, m, task.loss, split, held)
    x, y = task.batch(0)
    for mb, (xs, ys) in enumerate(zip(x.chunk(m), y.chunk(m))):
        stage.forward(mb, xs, ys)
    for mb in range(m):
        if split:
            stage.backward_input(mb)
            stage.backward_weight(mb)
        else:
            stage.backward(mb)
    stage.reset_step()
    return [p.grad for p in module.parameters()], stage.step_loss(), held, stage


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("option", ["stage", [1, 2], [0, 3, 4], "0,1,2,3,4"])
@pytest.mark.parametrize("split", [False, True])
def test_recomputing_stages_give_the_same_gradients_and_keep_less(model, option, split):
    task = make_task(model, batch_size=12, **MODELS[model])
    want, _, kept_all, plain = one_stage(task, "none", False)
    got, _, held, stage = one_stage(task, option, split)
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert stage.bytes_per_microbatch < plain.bytes_per_microbatch
    assert held.peak < kept_all.peak and held.now == 0 == kept_all.now  # and everything is let go


def test_recomputation_draws_the_same_dropout_masks():
    class Noisy:
        batch_size = 8

        def layers(self):
            torch.manual_seed(3)
            return [
                nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5)),
                nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5)),
                nn.Linear(6, 1),
            ]

        def loss(self, out, target):
            return nn.functional.mse_loss(out, target)

        def batch(self, step):
            g = torch.Generator().manual_seed(step)
            return torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)

    grads = []
    for option in ("none", "stage"):
        torch.manual_seed(11)  # the same masks in the first forward of each
        grads.append(one_stage(Noisy(), option, False, m=2)[0])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_runs_cut_the_stage_where_recomputation_starts_and_stops():
    assert runs_of([True, True, True], per_layer=False) == [(0, 3, True)]
    assert runs_of([False, True, True, False], per_layer=True) == [
        (0, 1, False),
        (1, 2, True),
        (2, 3, True),
        (3, 4, False),
    ]


@pytest.mark.parametrize(
    "value,message",
    [
        ("sometimes", "unknown recompute 'sometimes'"),
        ([], "names no layers"),
        ([1, 99], r"layer indices 0\.\.8"),
        (["a"], "must be whole-number layer indices such as \\[1, 2\\]; got 'a'"),
        (5, "must be 'none', 'stage' or a list"),
    ],
)
def test_bad_recompute_options_say_what_to_write(value, message):
    with pytest.raises(ValueError, match=message):
        prepare(RunConfig(model="mlp", model_args={"depth": 8}, recompute=value))


def test_recompute_with_a_hand_written_stage_step_is_refused():
    def step(stage, baton):
        pass

    with pytest.raises(ValueError, match="stage_step replaces"):
        prepare(RunConfig(recompute="stage", stage_step=step))


def test_options_parse_to_one_form():
    assert parse("none") == parse(None) == Recompute() and not parse("none").on
    assert parse(True) == parse("Stage") == Recompute("stage")
    assert parse("2, 1") == parse([1, 2]) == Recompute("layers", (1, 2))
    assert parse([1, 2]).share([0, 1, 2, 3]) == 0.5 and parse("stage").share([4, 5]) == 1.0
    assert parse([1]).share([0, 1], layer_forward=[3.0, 1.0]) == 0.25


def test_a_recomputing_backward_costs_a_forward_more_in_the_simulator():
    """Costs(recompute=1): every B (and I) costs F + B, W what it did; 1F1B's step goes from
    (m+p−1)(f+b) to (m+p−1)(2f+b)."""
    p, m, f, b = 4, 8, 1.0, 2.0
    trace = simulate(make_schedule("1f1b", p, m), Costs(forward=f, backward=b, recompute=1.0))
    assert trace.makespan == pytest.approx((m + p - 1) * backward_cost(f, f + b, 1.0))
    table = Costs(forward=f, backward=b, weight=1.0, recompute=0.5).table(1)
    assert (table["B"], table["I"], table["W"]) == ([2.5], [1.5], [1.0])
    with pytest.raises(ValueError, match="from 0 to 1"):
        Costs(recompute=2.0).table(2)


def test_stage_bytes_counts_what_each_option_keeps():
    base = dict(schedule="1f1b", p=2, m=4, model="mlp", model_args={"width": 32, "depth": 4}, batch_size=16)
    none, stage, layers = (stage_bytes(RunConfig(**base, recompute=o)) for o in ("none", "stage", [1, 2]))
    assert none["kept"] == none["B"] == none["I"]
    rows = 16 // 4
    assert stage["kept"][0] == rows * 32 * 4  # the first stage keeps its input alone
    assert stage["B"] == none["B"]  # and rebuilds the rest in its backward
    assert stage["kept"][0] < layers["kept"][0] < none["kept"][0] and layers["B"][0] < none["B"][0]
    assert layers["I"][0] == none["I"][0]  # an I keeps its rebuilt layers for the W
