"""The memory formulas against what torch really allocates for the course GPT: its parameter
count, Adam's state after one step, and the activations autograd keeps (counted by Stage)."""
import pytest
import torch
from torch import nn

from minipipe.planner.footprint import (PUBLISHED, Transformer, activation_bytes, activation_bytes_per_layer,
                                bytes_per_parameter, course_gpt, layer_parameters, parameters, training_bytes)
from minipipe.models import make_task
from minipipe.engine.stage import Stage

SHAPES = [dict(), dict(depth=2, width=64, heads=4, vocab=50, block=32), dict(depth=3, width=48, heads=3, block=24)]


def real_parameters(task) -> int:
    return sum(p.numel() for layer in task.layers() for p in layer.parameters())


@pytest.mark.parametrize("args", SHAPES)
def test_parameter_count_is_the_course_gpts(args):
    task = make_task("gpt", **args)
    assert parameters(course_gpt(task)) == real_parameters(task)


def test_a_block_is_12h2_plus_13h_and_gpt3_is_175b():
    shape = PUBLISHED["GPT-3 175B"]
    h = shape.hidden
    assert layer_parameters(shape) == 12 * h * h + 13 * h
    assert 174.5e9 < parameters(shape) < 175.5e9                  # the paper's "175.0B"
    assert 124e6 < parameters(PUBLISHED["GPT-3 Small (125M)"]) < 126e6
    untied = Transformer(**{**shape.__dict__, "tied_head": False})
    assert parameters(untied) - parameters(shape) == shape.vocab * h   # the head's own matrix


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_optimizer_state_is_what_torch_allocates(optimizer):
    task = make_task("gpt", depth=2, width=64, heads=4)
    model = nn.Sequential(*task.layers())
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=1e-3)
    x, y = task.batch(0)
    task.loss(model(x), y).backward()
    opt.step()
    n, per = parameters(course_gpt(task)), bytes_per_parameter("fp32", optimizer)
    tensors = list(model.parameters())
    # Adam keeps exp_avg and exp_avg_sq per parameter, and a 4-byte step count per tensor (left out of the formula)
    moments = sum(v.nbytes for st in opt.state.values() for k, v in st.items() if k != "step")
    steps = sum(st["step"].nbytes for st in opt.state.values() if "step" in st)
    assert moments == n * per.optimizer
    assert steps == (4 * len(tensors) if optimizer == "adam" else 0)
    assert sum(p.grad.nbytes for p in tensors) == n * per.gradients
    assert sum(p.nbytes for p in tensors) == n * per.parameters


def test_mixed_precision_adam_is_zeros_16_bytes():
    assert bytes_per_parameter("bf16-mixed", "adam").total == 16            # 2 + 2 + 12 (ZeRO §3.1)
    assert bytes_per_parameter("bf16-mixed", "adam").optimizer == 12
    assert bytes_per_parameter("fp32", "sgd-momentum").total == 12
    assert bytes_per_parameter("bf16-mixed", "sgd").optimizer == 4          # the fp32 master weights


def test_defaults_are_korthikantis_formula():
    for shape in PUBLISHED.values():
        s, h, a, b = shape.seq, shape.hidden, shape.heads, 2
        assert activation_bytes_per_layer(shape, b) == s * b * h * (34 + 5 * a * s / h)
        # without dropout: 16 sbh values of 2 bytes, and only the softmax output of the s² terms
        assert activation_bytes_per_layer(shape, b, dropout=False) == 32 * s * b * h + 2 * a * s * s * b


# The course GPT computes in fp32, has no dropout, and its attention is torch's
# scaled_dot_product_attention, which on CPU keeps no s×s scores (flash attention).
COURSE = dict(precision="fp32", dropout=False, attention="fused")


@pytest.mark.parametrize("args,micro_batch", [(SHAPES[0], 8), (SHAPES[1], 4), (SHAPES[2], 2)])
def test_activations_are_what_autograd_keeps(args, micro_batch):
    task = make_task("gpt", batch_size=micro_batch, **args)
    shape, layers = course_gpt(task), task.layers()
    x, _ = task.batch(0)
    blocks = Stage(1, nn.Sequential(*layers[1:-1]), n_stages=3, n_microbatches=1)   # the blocks only
    blocks.forward(0, layers[0](x).detach())
    measured, formula = blocks.bytes_per_microbatch, activation_bytes(shape, micro_batch, **COURSE)
    # The formula leaves out each LayerNorm's per-position mean and 1/std (2 LayerNorms x 2 x 4 bytes x s·b
    # per block); that is the whole difference, and under 2 % of the total even at these tiny widths.
    s, b = shape.seq, micro_batch
    assert measured - formula == shape.layers * 2 * 2 * 4 * s * b
    assert formula == pytest.approx(measured, rel=0.02)


def test_training_bytes_adds_up_by_kind():
    shape = PUBLISHED["GPT-3 175B"]
    got = training_bytes(shape, micro_batch=1, precision="bf16-mixed", optimizer="adam", in_flight=3)
    assert list(got) == ["parameters", "gradients", "optimizer", "activations"]
    assert got["parameters"] + got["gradients"] + got["optimizer"] == 16 * parameters(shape)
    assert got["activations"] == 3 * 96 * activation_bytes_per_layer(shape, 1)


@pytest.mark.parametrize("bad,match", [
    (lambda: bytes_per_parameter("fp8"), "precision"),
    (lambda: bytes_per_parameter("fp32", "lion"), "optimizer"),
    (lambda: Transformer(4, 30, 4, 10, 8), "multiple of heads"),
    (lambda: activation_bytes_per_layer(PUBLISHED["GPT-3 175B"], 0), "micro_batch"),
    (lambda: activation_bytes_per_layer(PUBLISHED["GPT-3 175B"], 1, attention="flash"), "attention"),
])
def test_bad_input_says_what_to_change(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
