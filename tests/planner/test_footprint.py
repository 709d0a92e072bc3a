"""The shape formulas (minipipe/planner/shapes.py) against what torch really allocates for the course GPT: its parameter
count, Adam's state after one step, and the activations autograd keeps (counted by Stage)."""

import pytest
import torch
from torch import nn

from minipipe.engine.stage import Stage
from minipipe.models import make_task
from minipipe.planner.presets import MODELS
from minipipe.planner.shapes import (
    ModelShape,
    activation_bytes,
    bytes_per_parameter,
    course_gpt,
    layer_activation_bytes,
    layer_parameters,
    norm_statistics_bytes,
    parameters,
    training_bytes,
)

SHAPES = [dict(), dict(depth=2, width=64, heads=4, vocab=50, block=32), dict(depth=3, width=48, heads=3, block=24)]


def real_parameters(task) -> int:
    return sum(p.numel() for layer in task.layers() for p in layer.parameters())


@pytest.mark.parametrize("args", SHAPES)
def test_parameter_count_is_the_course_gpts(args):
    task = make_task("gpt", **args)
    assert parameters(course_gpt(task)) == real_parameters(task)


def test_a_block_is_12h2_plus_13h_and_gpt3_is_175b():
    shape = MODELS["gpt3-175b"]
    h = shape.hidden
    assert layer_parameters(shape) == 12 * h * h + 13 * h
    assert 174.5e9 < parameters(shape) < 175.5e9  # the paper's "175.0B"
    assert 124e6 < parameters(MODELS["gpt3-125m"]) < 126e6
    untied = shape.with_(tied_head=False)
    assert parameters(untied) - parameters(shape) == shape.vocab * h  # the head's own matrix


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
    assert bytes_per_parameter("bf16-mixed", "adam").total == 16  # 2 + 2 + 12 (ZeRO §3.1)
    assert bytes_per_parameter("bf16-mixed", "adam").optimizer == 12
    assert bytes_per_parameter("fp32", "sgd-momentum").total == 12
    assert bytes_per_parameter("bf16-mixed", "sgd").optimizer == 4  # the fp32 master weights


GPT3 = [MODELS[k] for k in ("gpt3-125m", "gpt3-2.7b", "gpt3-6.7b", "gpt3-175b")]


def test_defaults_are_korthikantis_formula():
    for shape in GPT3:
        s, h, a, b = shape.seq, shape.hidden, shape.heads, 2
        paper = layer_activation_bytes(shape, b) - norm_statistics_bytes(shape, b)  # the paper leaves them out
        assert paper == s * b * h * (34 + 5 * a * s / h)
        # without dropout: 16 sbh values of 2 bytes, and only the softmax output of the s² terms
        dry = shape.with_(dropout=False)
        assert layer_activation_bytes(dry, b) - norm_statistics_bytes(dry, b) == 32 * s * b * h + 2 * a * s * s * b


@pytest.mark.parametrize("args,micro_batch", [(SHAPES[0], 8), (SHAPES[1], 4), (SHAPES[2], 2)])
def test_activations_are_what_autograd_keeps(args, micro_batch):
    task = make_task("gpt", batch_size=micro_batch, **args)
    shape, layers = course_gpt(task), task.layers()
    x, _ = task.batch(0)
    blocks = Stage(1, nn.Sequential(*layers[1:-1]), n_stages=3, n_microbatches=1)  # the blocks only
    blocks.forward(0, layers[0](x).detach())
    # The course GPT computes in fp32, has no dropout, and its attention is torch's
    # scaled_dot_product_attention, which on CPU keeps no s×s scores (flash attention): course_gpt says so.
    measured, formula = blocks.bytes_per_microbatch, activation_bytes(shape, micro_batch, "fp32")
    assert measured == formula  # every byte, each LayerNorm's per-position mean and 1/std included


def test_training_bytes_adds_up_by_kind():
    shape = MODELS["gpt3-175b"]
    got = training_bytes(shape, micro_batch=1, precision="bf16-mixed", optimizer="adam", in_flight=3)
    assert list(got) == ["parameters", "gradients", "optimizer", "activations"]
    assert got["parameters"] + got["gradients"] + got["optimizer"] == 16 * parameters(shape)
    assert got["activations"] == 3 * 96 * layer_activation_bytes(shape, 1)


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda: bytes_per_parameter("fp8"), "precision"),
        (lambda: bytes_per_parameter("fp32", "lion"), "optimizer"),
        (lambda: ModelShape("odd", 4, 30, 4, 10, 8), "multiple of heads"),
        (lambda: layer_activation_bytes(MODELS["gpt3-175b"], 0), "micro_batch"),
        (lambda: MODELS["gpt3-175b"].with_(attention="flash"), "attention"),
        (lambda: layer_activation_bytes(MODELS["gpt3-175b"], 1, recompute="some"), "recompute"),
    ],
)
def test_bad_input_says_what_to_change(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_zeros_split_is_one_rule_for_the_memory_and_the_optimizer_step():
    """ZeRO splits the state over the dp·cp ranks that hold the same parameters (Layout.zero_shards):
    the memory the search ranks by, the rank's own footprint and the optimizer step all divide by it."""
    from minipipe.planner import Layout, evaluate, make_setup
    from minipipe.planner.evaluate import predictor

    setup = make_setup("llama2-7b", 32, "a100-80gb", batch=32)
    rows = {z: evaluate(setup, Layout(2, 2, 4, 1, 8, "1f1b", 1, "full", zero=z, cp=2)) for z in (0, 1)}
    assert Layout(2, 2, 4, 1, 8, zero=1, cp=2).zero_shards == 8 and Layout(2, 2, 4, 1, 8, cp=2).zero_shards == 1
    assert rows[1].optimizer == pytest.approx(rows[0].optimizer / 8, rel=1e-12)
    fp, layout = predictor(setup).footprint, rows[1].layout
    assert rows[1].memory["optimizer"] == pytest.approx(fp.of_rank(layout, rows[1].memory_rank)["optimizer"], rel=1e-12)
    assert rows[1].memory["optimizer"] < rows[0].memory["optimizer"] / 7


@pytest.mark.parametrize(
    ("optimizer", "per_parameter", "per_tensor"), [("sgd", 0, 0), ("sgd-momentum", 4, 0), ("adam", 8, 4)]
)
def test_one_ranks_optimizer_state_is_its_moments_and_adams_step_counts(optimizer, per_parameter, per_tensor):
    """One GPU, fp32, no ZeRO: the optimizer holds its moments per parameter and, for Adam alone, a
    4-byte step count per parameter tensor."""
    from minipipe.planner.footprint import memory_per_rank
    from minipipe.planner.presets import MODELS
    from minipipe.planner.setup_and_layout import Layout

    shape = MODELS["gpt3-125m"]
    (mine,) = memory_per_rank(shape, Layout(1, 1, 1, 1, 1), "fp32", optimizer)
    (adam,) = memory_per_rank(shape, Layout(1, 1, 1, 1, 1), "fp32", "adam")
    n = parameters(shape)
    tensors = (adam["optimizer"] - 8 * n) / 4
    assert tensors == int(tensors) and tensors > 0
    assert mine["optimizer"] == per_parameter * n + per_tensor * tensors
    assert mine["parameters"] == mine["gradients"] == 4 * n


def test_fp32_gradients_under_mixed_precision_are_4_bytes_each():
    from minipipe.planner.footprint import memory_per_rank
    from minipipe.planner.presets import MODELS
    from minipipe.planner.setup_and_layout import Layout

    shape, one = MODELS["gpt3-125m"], Layout(1, 1, 1, 1, 1)
    (bf16,) = memory_per_rank(shape, one, "bf16-mixed")
    (fp32,) = memory_per_rank(shape, one, "bf16-mixed", fp32_gradients=True)
    assert bf16["gradients"] == 2 * parameters(shape) and fp32["gradients"] == 4 * parameters(shape)
    assert {k: v for k, v in fp32.items() if k != "gradients"} == {k: v for k, v in bf16.items() if k != "gradients"}


@pytest.mark.parametrize(("tp", "cp", "dp", "b", "m"), [(1, 2, 16, 1, 4), (2, 4, 4, 2, 8)])  # 64 GPUs, pp 2
def test_each_ring_attention_step_passes_one_ranks_keys_and_values(monkeypatch, tp, cp, dp, b, m):
    """What the block's time sends round the cp ring each step: a rank's K and V, 2 · value bytes ·
    b · s/cp tokens · kv_width/tp (llama2-7b: kv_width = hidden, bf16)."""
    from minipipe.planner import Layout, block_time, make_setup
    from minipipe.planner.evaluate import predictor

    sent = []
    real = block_time.ring_attention_time
    monkeypatch.setattr(
        block_time, "ring_attention_time", lambda d, kv, n, link: sent.append((kv, n)) or real(d, kv, n, link)
    )
    setup = make_setup("llama2-7b", 64, "a100-80gb", batch=64)
    predictor(setup).block(Layout(tp, 2, dp, b, m, cp=cp))
    shape = setup.model
    assert sent and set(sent) == {(2 * 2 * b * shape.seq / cp * shape.hidden / tp, cp)}
