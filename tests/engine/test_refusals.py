"""What would run and give a silently wrong answer, or fail deep inside torch or multiprocessing,
is refused by prepare() with a ValueError that says what is wrong and what to change, before any
process starts: non-finite or ill-typed hyper-parameters, seeds and model settings, parameters
shared between stages, a closure over an open file, a hand-written schedule that disagrees with
an explicit p and m, costs with no work in them, a schedule text's bad header field."""

import math
import threading
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from minipipe import Costs, make_schedule
from minipipe.engine.config import RunConfig, prepare
from minipipe.schedule import theory
from minipipe.schedule.ir import Schedule

WIDTH = 8


def model_of(layers):
    """A model whose layers() returns what `layers()` builds, on WIDTH-wide data."""

    def make(batch_size, seed, **settings):
        def batch(step):
            x = torch.randn(batch_size, WIDTH)
            return x, torch.sin(x)

        return SimpleNamespace(layers=layers, loss=F.mse_loss, batch=batch)

    return make


def linears(n):
    return [nn.Linear(WIDTH, WIDTH) for _ in range(n)]


def one_layer_twice():
    shared, middle = linears(2)
    return [shared, nn.Tanh(), middle, shared]  # an encoder and decoder sharing one Linear


def tied_weights():
    first, middle, last = linears(3)
    last.weight = first.weight  # tied embeddings: two modules, one Parameter
    return [first, nn.Tanh(), middle, last]


def tied_within_a_stage():
    first, second, rest, last = linears(4)
    second.weight = first.weight
    return [first, second, rest, last]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "0.1", None, True])
def test_a_learning_rate_that_is_not_a_positive_finite_number_is_refused(value):
    with pytest.raises(ValueError, match=rf"lr must be a finite number > 0 .*got {re_escape(value)}"):
        prepare(RunConfig(lr=value))


@pytest.mark.parametrize("value", ["0", 1.5, None, True, -1])
def test_a_seed_that_is_not_a_whole_number_is_refused(value):
    with pytest.raises(
        ValueError,
        match=rf"seed must be a whole number from 0 to 2\^40 - 1 = 1,099,511,627,775, got {re_escape(value)}",
    ):
        prepare(RunConfig(seed=value))


@pytest.mark.parametrize(
    "value,message",
    [
        ([("width", 8)], "model_args must be a dict of settings, .*got a list"),
        ({8: 8}, "model_args' names must be strings .*got 8"),
        ({"width": threading.Lock()}, "model_args' value of width .*cannot be sent to the worker processes"),
        ({"width": (i for i in range(3))}, "model_args' value of width .*cannot be sent to the worker processes"),
    ],
)
def test_model_args_that_cannot_reach_the_workers_are_refused(value, message):
    with pytest.raises(ValueError, match=message):
        prepare(RunConfig(model=model_of(lambda: linears(4)), model_args=value))


@pytest.mark.parametrize(
    "layers,names",
    [(one_layer_twice, r"layers 0 and 3 \(stages 0 and 1\)"), (tied_weights, r"layers 0 and 3 \(stages 0 and 1\)")],
)
def test_a_parameter_shared_between_stages_is_refused_naming_the_layers(layers, names):
    with pytest.raises(ValueError, match=rf"{names} share a parameter .*each stage would train its own copy"):
        prepare(RunConfig(model=model_of(layers), p=2))


@pytest.mark.parametrize("layers", [one_layer_twice, tied_weights, tied_within_a_stage])
def test_a_parameter_shared_within_one_stage_is_fine(layers):
    prepare(RunConfig(model=model_of(layers), p=1))
    prepare(RunConfig(model=model_of(tied_within_a_stage), p=2))


def test_a_closure_over_a_file_open_for_reading_is_refused(tmp_path):
    (tmp_path / "data.txt").write_text("1 2 3")
    with open(tmp_path / "data.txt") as data:

        def make(batch_size, seed):
            print(data)  # cloudpickle would copy the file's text into each worker
            return model_of(lambda: linears(4))(batch_size, seed)

        with pytest.raises(ValueError, match="cannot be sent to the worker processes.*open file.*data.txt"):
            prepare(RunConfig(model=make))


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(p=2), r"the schedule you wrote has p=4 .*but p=2 was given"),
        (dict(m=4), r"the schedule you wrote has m=8 .*but m=4 was given"),
        (dict(p=2, m=4), r"has p=4 and m=8 .*but p=2 and m=4 were given"),
    ],
)
def test_a_hand_written_schedule_that_disagrees_with_an_explicit_p_or_m_is_refused(changes, message):
    # p=2 and m=4 are also the defaults: given, they are refused all the same
    schedule = Schedule.from_text(make_schedule("1f1b", 4, 8).to_text())
    with pytest.raises(ValueError, match=message):
        prepare(RunConfig(schedule=schedule, **changes))
    assert (prepare(RunConfig(schedule=schedule)).schedule.p, prepare(RunConfig(schedule=schedule)).config.m) == (4, 8)
    assert prepare(RunConfig(schedule=schedule, p=4, m=8)).config.p == 4


def test_costs_without_work_are_refused_not_divided_by():
    with pytest.raises(ValueError, match="forward and backward are both 0"):
        Costs(forward=0, backward=0)
    with pytest.raises(ValueError, match="f and b are both 0"):
        theory.bubble_fraction("1f1b", 2, 4, 1, 0.0, 0.0)
    assert theory.bubble_fraction("1f1b", 2, 4, 1, 0.0, 1.0) == pytest.approx(1 / 5)


@pytest.mark.parametrize(
    "header,message",
    [
        ("p=x", "header field p='x' is not a whole number"),
        ("m=four", "header field m='four' is not a whole number"),
        ("placement=0,a", "header field placement='0,a' is not a list of ranks"),
        ("q=4", "unknown header field 'q'; the fields are kind, p, m, v, placement"),
    ],
)
def test_a_bad_schedule_header_field_is_named(header, message):
    body = "\n".join(make_schedule("1f1b", 2, 4).to_text().splitlines()[1:])
    with pytest.raises(ValueError, match=message):
        Schedule.from_text(f"# minipipe schedule kind=1f1b {header}\n{body}")


def re_escape(value):
    import re

    return re.escape(repr(value))
