"""Tensor parallelism gives the unsplit layers' outputs and gradients, and torch's own agrees.

Processes start once per world size for this module (2 ranks, then 4) and run every case; each
rank sends back its outputs, input gradients, weight-gradient shards and the collectives its
hook heard. Here, in plain torch on one process, the unsplit layers are the reference; the
shards are put back together with `unshard_state` and the hook's log is held to `collectives()`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minipipe.models import Block, Embedding, Readout, ResidualLinear, make_task, seeded
from minipipe.models.layers import TensorParallelBlock, TensorParallelResidualLinear
from minipipe.parallel.mesh import Mesh, make_groups
from minipipe.parallel.tensor import (
    FORMS,
    Collective,
    ColumnParallelLinear,
    RowParallelLinear,
    Shard,
    TensorParallelForm,
    TPGroup,
    check_layer,
    check_tensor_parallel,
    collectives,
    register_form,
    shard,
    shard_spec,
    shard_state,
    tensor_parallel,
    unshard,
    unshard_state,
)
from minipipe.traffic import TrafficKind
from tests.support.spawn import run_ranks

TOL = dict(rtol=1e-5, atol=1e-6)
REDUCE, GATHER = TrafficKind.TP_ALL_REDUCE, TrafficKind.TP_ALL_GATHER


# -- the cases: full layers, an input and a loss, the same in every process ------------------
def case(name: str):
    """(layers, x, loss_fn) of a named case, built from fixed seeds."""
    if name == "residual":
        layers = seeded(1, lambda: [ResidualLinear(16)])
        x = seeded(2, lambda: torch.randn(4, 16)).requires_grad_(True)
    elif name == "block":
        layers = seeded(1, lambda: [Block(16, heads=4)])
        x = seeded(2, lambda: torch.randn(2, 5, 16)).requires_grad_(True)
    elif name in ("mlp", "gpt"):
        task = (
            make_task("mlp", width=16, depth=3, batch_size=4)
            if name == "mlp"
            else make_task("gpt", width=16, heads=4, depth=2, vocab=11, block=8, batch_size=3)
        )
        x, y = task.batch(0)
        return task.layers(), x, lambda out: task.loss(out, y)
    else:
        raise KeyError(name)
    weights = seeded(3, lambda: torch.randn(x.shape))  # a loss whose gradient differs per element
    return layers, x, lambda out: (out * weights).sum()


def run_case(name: str, tp: TPGroup | None):
    """One forward and backward; tp=None runs the unsplit layers."""
    layers, x, loss_fn = case(name)
    log, phase = [], ["forward"]
    if tp is not None:
        hook = lambda kind, nbytes, start, end: log.append((phase[0], kind, nbytes))  # noqa: E731
        layers = [tensor_parallel(layer, tp.rank, tp.size, tp.group, hook=hook) for layer in layers]
    out = nn.Sequential(*layers)(x)
    loss = loss_fn(out)
    phase[0] = "backward"
    loss.backward()
    return {
        "out": out.detach(),
        "loss": loss.item(),
        "x_grad": None if x.grad is None else x.grad.clone(),
        "grads": [{k: p.grad.clone() for k, p in layer.named_parameters()} for layer in layers],
        "log": log,
    }


def mesh_of(shape: tuple) -> Mesh:
    """The mesh of a (pp, dp, tp) shape."""
    pp, dp, tp = shape
    return Mesh(pp, dp=dp, tp=tp)


# -- what the worker processes run ----------------------------------------------------------
def run_cases(rank: int, world: int, plan: list[tuple[str, tuple]]):
    """Each case on the tp groups of its mesh; an error is returned, so other cases still run."""
    import traceback

    out = {}
    for name, shape in plan:
        groups = make_groups(mesh_of(shape), timeout=60)
        tp = TPGroup(groups.tp.group, groups.tp.index, groups.tp.size)
        try:
            out[name, shape] = run_case(name, tp) if name != "torch" else torch_against_ours(tp)
        except Exception:
            out[name, shape] = traceback.format_exc()
    return out


def mlp_subblock():
    return seeded(4, lambda: nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16)))


def mlp_input():
    return seeded(5, lambda: (torch.randn(3, 7, 16), torch.randn(3, 7, 16)))


def torch_against_ours(tp: TPGroup):
    """An MLP sub-block split by torch.distributed.tensor.parallel and by this module."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    theirs = parallelize_module(
        mlp_subblock(), init_device_mesh("cpu", (tp.size,)), {"0": ColwiseParallel(), "2": RowwiseParallel()}
    )
    full = mlp_subblock()
    ours = nn.Sequential(
        ColumnParallelLinear.from_linear(full[0], tp), nn.GELU(), RowParallelLinear.from_linear(full[2], tp)
    )
    result = {}
    for label, model in (("theirs", theirs), ("ours", ours)):
        x, w = mlp_input()
        x.requires_grad_(True)
        out = model(x)
        (out * w).sum().backward()
        grads = {k: p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for k, p in model.named_parameters()}
        result[label] = {"out": out.detach(), "x_grad": x.grad, "grads": grads}
    return result


TWO = [("residual", (1, 1, 2)), ("block", (1, 1, 2)), ("mlp", (1, 1, 2)), ("gpt", (1, 1, 2)), ("torch", (1, 1, 2))]
FOUR = [("gpt", (1, 1, 4)), ("block", (1, 2, 2))]  # tp=4: one head per rank; tp=2 inside a dp=2 mesh


@pytest.fixture(scope="module")
def two_ranks():
    return run_ranks(run_cases, 2, TWO, timeout=180)


@pytest.fixture(scope="module")
def four_ranks():
    return run_ranks(run_cases, 4, FOUR, timeout=240)


def results_of(ranks, name, shape):
    got = [r[name, shape] for r in ranks]
    for rank, g in enumerate(got):
        assert not isinstance(g, str), f"rank {rank} failed on {name}:\n{g}"
    return got


# -- the checks against the unsplit layers --------------------------------------------------
def assert_same_as_unsplit(name: str, shape: tuple, ranks: list[dict]):
    mesh = mesh_of(shape)
    ref = run_case(name, None)
    layers, x, _ = case(name)
    for group in mesh.groups("tp"):
        mine = [ranks[r] for r in group]
        for rank, got in zip(group, mine):
            torch.testing.assert_close(
                got["out"], ref["out"], **TOL, msg=lambda m: f"{name}: rank {rank}'s output: {m}"
            )
            assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5)
            if ref["x_grad"] is not None:
                torch.testing.assert_close(
                    got["x_grad"], ref["x_grad"], **TOL, msg=lambda m: f"{name}: rank {rank}'s input gradient: {m}"
                )
        for i, layer in enumerate(layers):
            spec = shard_spec(layer)
            whole = unshard_state([got["grads"][i] for got in mine], spec)
            assert set(whole) == set(ref["grads"][i])
            for k, g in ref["grads"][i].items():
                torch.testing.assert_close(whole[k], g, **TOL, msg=lambda m: f"{name}: gradient of layer {i} {k}: {m}")
                if k not in spec:  # replicated: every rank must take the same optimizer step
                    for rank, got in zip(group, mine):
                        assert torch.equal(got["grads"][i][k], mine[0]["grads"][i][k]), (
                            f"{name}: replicated {k} of layer {i} differs on rank {rank}"
                        )


def expected_log(name: str, tp_size: int):
    """The collectives() formula, layer by layer: forward in layer order, backward in reverse."""
    layers, x, _ = case(name)
    shapes, h = [], x
    with torch.no_grad():
        for layer in layers:
            shapes.append(tuple(h.shape))
            h = layer(h)
    per_layer = [
        collectives(layer, s, tp_size, input_grad=(i > 0 or x.requires_grad))
        for i, (layer, s) in enumerate(zip(layers, shapes))
    ]
    fwd = [c for cs in per_layer for c in cs if c.phase == "forward"]
    bwd = [c for cs in reversed(per_layer) for c in cs if c.phase == "backward"]
    return [(c.phase, c.kind, c.nbytes) for c in fwd + bwd]


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["residual", "block", "mlp", "gpt"])
def test_two_ranks_give_the_unsplit_outputs_and_gradients(two_ranks, name):
    shape = (1, 1, 2)
    assert_same_as_unsplit(name, shape, results_of(two_ranks, name, shape))


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["residual", "block", "mlp", "gpt"])
def test_the_hook_hears_what_the_formula_says(two_ranks, name):
    expected = expected_log(name, 2)
    assert expected, "every case has something to say"
    for rank, got in enumerate(results_of(two_ranks, name, (1, 1, 2))):
        assert got["log"] == expected, f"{name}, rank {rank}"


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, shape", FOUR, ids=["gpt-tp4", "block-tp2-in-dp2"])
def test_four_ranks_give_the_unsplit_outputs_and_gradients(four_ranks, name, shape):
    ranks = results_of(four_ranks, name, shape)
    assert_same_as_unsplit(name, shape, ranks)
    for rank, got in enumerate(ranks):
        assert got["log"] == expected_log(name, mesh_of(shape).tp), f"{name}, rank {rank}"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_torch_tensor_parallel_agrees_with_ours(two_ranks):
    ranks = results_of(two_ranks, "torch", (1, 1, 2))
    full = mlp_subblock()
    x, w = mlp_input()
    x.requires_grad_(True)
    out = full(x)
    (out * w).sum().backward()
    spec = {"0.weight": Shard(0), "0.bias": Shard(0), "2.weight": Shard(1)}
    for rank, got in enumerate(ranks):
        theirs, ours = got["theirs"], got["ours"]
        for key in ("out", "x_grad"):
            torch.testing.assert_close(ours[key], theirs[key], **TOL, msg=lambda m: f"rank {rank} {key}: {m}")
            torch.testing.assert_close(ours[key], out.detach() if key == "out" else x.grad, **TOL)
        assert set(ours["grads"]) == set(theirs["grads"]) == set(spec) | {"2.bias"}
        for k, g in ours["grads"].items():
            torch.testing.assert_close(g, theirs["grads"][k], **TOL, msg=lambda m: f"rank {rank} grad {k}: {m}")
    tp = TPGroup(None, 0, 2)
    assert (
        shard_spec(
            nn.Sequential(
                ColumnParallelLinear.from_linear(full[0], tp), nn.GELU(), RowParallelLinear.from_linear(full[2], tp)
            )
        )
        == spec
    )
    whole = unshard_state([got["ours"]["grads"] for got in ranks], spec)
    for k, p in full.named_parameters():
        torch.testing.assert_close(whole[k], p.grad, **TOL, msg=lambda m: f"unsplit grad {k}: {m}")


# -- without processes: shards, specs, formulas, checks -------------------------------------
def test_shards_put_back_together_and_qkv_keeps_each_ranks_heads():
    full = torch.randn(3 * 16, 8)  # a qkv weight: q | k | v, 4 heads of 4
    for size in (1, 2, 4):
        parts = [shard(full, Shard(0, 3), r, size) for r in range(size)]
        assert torch.equal(unshard(parts, Shard(0, 3)), full)
        n = 16 // size
        for r, part in enumerate(parts):
            for i in range(3):  # rank r's rows of q, of k and of v: its heads in each
                assert torch.equal(part[i * n : (i + 1) * n], full[i * 16 + r * n : i * 16 + (r + 1) * n])
    cols = torch.randn(5, 12)
    assert torch.equal(unshard([shard(cols, Shard(1), r, 3) for r in range(3)], Shard(1)), cols)


def test_state_dicts_shard_and_gather_by_the_spec():
    block = seeded(0, lambda: Block(16, heads=4))
    spec = shard_spec(block)
    full = block.state_dict()
    assert set(spec) < set(full) and "ln1.weight" not in spec and "proj.bias" not in spec
    shards = []
    for rank in range(2):
        tp_block = TensorParallelBlock(block, TPGroup(None, rank, 2))  # building one does not talk
        assert shard_spec(tp_block) == spec
        mine = tp_block.state_dict()
        expected = shard_state(full, spec, rank, 2)
        assert set(mine) == set(full)
        for k in full:
            assert torch.equal(mine[k], expected[k]), k
        shards.append(mine)
    gathered = unshard_state(shards, spec)
    assert all(torch.equal(gathered[k], full[k]) for k in full)
    assert shard_spec(ResidualLinear(8)) == shard_spec(
        TensorParallelResidualLinear(ResidualLinear(8), TPGroup(None, 0, 2))
    )
    assert shard_spec(Embedding(5, 4, 8)) == {} and shard_spec(Readout(8, 3)) == {}


def test_a_stages_spec_names_its_layers_split_parameters():
    layers = make_task("gpt", width=16, heads=4, depth=2).layers()
    spec = shard_spec(nn.Sequential(*layers))
    assert spec == {f"{i}.{k}": s for i in (1, 2) for k, s in shard_spec(layers[1]).items()}
    tp_stage = nn.Sequential(
        *[layers[0]] + [TensorParallelBlock(b, TPGroup(None, 0, 2)) for b in layers[1:3]] + [layers[3]]
    )
    assert shard_spec(tp_stage) == spec
    full = nn.Sequential(*layers).state_dict()
    assert all(tp_stage.state_dict()[k].shape == v.shape for k, v in shard_state(full, spec, 0, 2).items())
    lone = nn.Sequential(
        ColumnParallelLinear.from_linear(nn.Linear(4, 6, bias=False), TPGroup(None, 0, 2)),
        RowParallelLinear.from_linear(nn.Linear(6, 4), TPGroup(None, 0, 2)),
    )
    assert shard_spec(lone) == {"0.weight": Shard(0), "1.weight": Shard(1)}


def test_layers_without_a_tp_form_come_back_unchanged():
    for layer in (Embedding(5, 4, 8), Readout(8, 3), nn.Linear(8, 8)):
        assert tensor_parallel(layer, 1, 2) is layer
    block = Block(8, 2)
    assert tensor_parallel(block, 0, 1) is block
    assert isinstance(tensor_parallel(block, 1, 2), TensorParallelBlock)


def test_one_rank_of_a_tp_form_is_the_whole_layer():
    """With a group of one, f, g and the gather do nothing: the same numbers as the layer."""
    for layer, x in ((ResidualLinear(8), torch.randn(3, 8)), (Block(8, 2), torch.randn(2, 4, 8))):
        form = (TensorParallelBlock if isinstance(layer, Block) else TensorParallelResidualLinear)(
            layer, TPGroup(None, 0, 1)
        )
        torch.testing.assert_close(form(x), layer(x), rtol=0, atol=0)


def test_the_formula_from_shapes():
    assert collectives(ResidualLinear(16), (4, 16), 2) == [
        Collective(GATHER, "forward", 4 * 16 * 4),
        Collective(REDUCE, "backward", 4 * 16 * 4),
    ]
    assert collectives(ResidualLinear(16), (4, 16), 2, input_grad=False) == [Collective(GATHER, "forward", 256)]
    block = collectives(Block(16, 4), (2, 5, 16), 4, dtype=torch.bfloat16)
    assert [(c.kind, c.phase) for c in block] == [(REDUCE, "forward")] * 2 + [(REDUCE, "backward")] * 2
    assert {c.nbytes for c in block} == {2 * 5 * 16 * 2}
    assert collectives(Block(16, 4), (2, 5, 16), 1) == [] and collectives(Readout(16, 3), (2, 16), 2) == []


@pytest.mark.parametrize(
    "layer, tp, advice",
    [
        (
            Block(16, 2),
            4,
            r"tp=4 must divide the GPT block's heads \(attention is split by heads\), which is 2; "
            r"choose tp from 1, 2$",
        ),
        (Block(12, 6), 4, r"must divide the GPT block's heads.*which is 6; choose tp from 1, 2, 3, 6"),
        (ResidualLinear(6), 4, r"tp=4 must divide the MLP's width .*which is 6; choose tp from 1, 2, 3, 6"),
        (ResidualLinear(6), 0, r"tp must be a whole number >= 1"),
    ],
)
def test_bad_splits_are_refused_with_advice(layer, tp, advice):
    with pytest.raises(ValueError, match=advice):
        check_layer(layer, tp)
    with pytest.raises(ValueError, match=advice):
        tensor_parallel(layer, 0, tp)


def test_a_model_without_a_tp_form_is_refused_for_tp_above_one():
    layers = [nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)]
    check_tensor_parallel(layers, 1)
    with pytest.raises(ValueError, match=r"no tensor-parallel form: none of its layers \(Linear, ReLU\).*tp=1"):
        check_tensor_parallel(layers, 2)
    check_tensor_parallel(make_task("gpt", width=16, heads=4).layers(), 4)
    with pytest.raises(ValueError, match="choose tp from 1, 2, 4"):
        check_tensor_parallel(make_task("gpt", width=16, heads=4).layers(), 8)
    with pytest.raises(ValueError, match="row-parallel|input features"):
        RowParallelLinear.from_linear(nn.Linear(6, 4), TPGroup(None, 0, 4))
    with pytest.raises(ValueError, match="each of the 3 fused parts"):
        ColumnParallelLinear.from_linear(nn.Linear(4, 3 * 6), TPGroup(None, 0, 4), parts=3)


def test_a_model_declares_the_tensor_parallel_form_of_its_own_layers():
    """parallel/ knows no model: a layer type gets a form by registering one, as the course's
    layers do (models/layers.py). Building a form does not talk, so no processes are needed."""

    class Doubled(nn.Module):  # 2·(W x), a layer minipipe has never heard of
        def __init__(self, width):
            super().__init__()
            self.linear = nn.Linear(width, width)

        def forward(self, x):
            return 2 * self.linear(x)

    class DoubledTP(TensorParallelForm):
        shards = {"linear.weight": Shard(0), "linear.bias": Shard(0)}

        def __init__(self, layer, tp):
            super().__init__()
            self.tp, self.linear = tp, ColumnParallelLinear.from_linear(layer.linear, tp)

        @classmethod
        def constraints(cls, layer):
            return [(layer.linear.out_features, "the doubled layer's width")]

        @classmethod
        def collectives(cls, layer, nbytes, input_grad):
            return [Collective(GATHER, "forward", nbytes)] + [Collective(REDUCE, "backward", nbytes)] * input_grad

    layer = Doubled(6)
    assert tensor_parallel(layer, 0, 2) is layer and collectives(layer, (3, 6), 2) == []
    with pytest.raises(ValueError, match="register_form"):
        check_tensor_parallel([layer], 2)
    register_form(Doubled, DoubledTP)
    try:
        form = tensor_parallel(layer, 1, 2)
        assert isinstance(form, DoubledTP) and form.linear.weight.shape == (3, 6)
        assert torch.equal(form.linear.weight, layer.linear.weight[3:])
        assert shard_spec(layer) == shard_spec(form) == DoubledTP.shards
        assert collectives(layer, (3, 6), 2, input_grad=False) == [Collective(GATHER, "forward", 3 * 6 * 4)]
        with pytest.raises(
            ValueError, match=r"tp=4 must divide the doubled layer's width, which is 6; choose tp from 1, 2, 3, 6"
        ):
            check_tensor_parallel([layer], 4)
        with pytest.raises(ValueError, match="TensorParallelForm subclass"):
            register_form(Doubled, nn.Linear)
    finally:
        FORMS.pop(Doubled)
