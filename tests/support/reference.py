"""The independent reference: the unsplit model, on one process, full batch at once. Its
mixture-of-experts layers route the batch in the groups the run's ranks hold (capacity is per
group: models/moe.py), so that one process drops what the split run drops."""

import pytest
import torch
from torch import nn

from minipipe.models import make_task, task_of
from minipipe.models.moe import group_of, layout_groups, moe_layers, use_groups
from minipipe.parallel.accounting import expected_bytes
from minipipe.traffic import KINDS


def route_as_the_run(model, config, x) -> None:
    """Every MoE layer of `model` routes in the groups of the run's dp, m and cp."""
    m = config.m if config.m else 1
    use_groups(
        model,
        layout_groups(x.shape[0], x.shape[1], dp=config.dp, m=m, cp=getattr(config, "cp", 1))
        if moe_layers(model)
        else None,
    )


def reference_run(config, steps: int):
    """Losses per step, the first step's gradients, and the final state of the unsplit model
    trained on the full batch with the same optimizer."""
    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    if moe_layers(model):
        route_as_the_run(model, config, task.batch(0)[0])
    opt = (torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=config.lr)
    losses, grads = [], None
    for step in range(steps):
        x, y = task.batch(step)
        opt.zero_grad(set_to_none=True)
        loss = task.loss(model(x), y)
        loss.backward()
        if step == 0:
            grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads, {k: v.clone() for k, v in model.state_dict().items()}


def assert_same_math(result, steps: int, rtol=1e-5, atol=1e-6):
    losses, grads, state = reference_run(result.config, steps)
    c = result.config
    label = f"{c.schedule} p={c.p} dp={c.dp} cp={c.cp} tp={c.tp} m={c.m} {c.model}"
    torch.testing.assert_close(
        torch.tensor(result.losses),
        torch.tensor(losses),
        rtol=rtol,
        atol=atol,
        msg=lambda m: f"{label}: losses differ: {m}",
    )
    assert set(result.grads) == set(grads), f"{label}: gradient names differ"
    for name, g in grads.items():
        torch.testing.assert_close(
            result.grads[name], g, rtol=rtol, atol=atol, msg=lambda m: f"{label}: gradient of {name} differs: {m}"
        )
    for name, w in state.items():
        torch.testing.assert_close(
            result.state[name],
            w,
            rtol=rtol,
            atol=atol,
            msg=lambda m: f"{label}: weight {name} differs after {steps} steps: {m}",
        )


# -- minipipe's runs, trained by torch's pipelining (torch_runs: lesson 15) -------------------
def unsplit_losses(config):
    """The whole model on one process, in plain torch: the losses every engine must give."""
    task = make_task(config.model, batch_size=config.batch_size, seed=config.seed, **config.model_args)
    model = nn.Sequential(*task.layers())
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    losses = []
    for step in range(config.steps):
        loss = task.loss(model(task.batch(step)[0]), task.batch(step)[1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def assert_bytes_match_the_formulas(result):
    """Every rank's measured bytes of each kind are what the formulas say (parallel/accounting.py)."""
    layers = task_of(result.config).layers()
    measured = result.traffic()
    for rank in range(result.plan.world):
        expected = expected_bytes(result.plan, rank, layers)
        got = {k: measured[rank].get(k, 0) for k in KINDS}
        assert got == pytest.approx(expected, rel=1e-12, abs=0), (
            f"{result.config.schedule} {result.plan.mesh.describe()} rank {rank}: measured {got}, formula {expected}"
        )


def reference_routing(config) -> dict:
    """{MoE layer: {group: (choices, slots)}} of the first step's forward on one process."""
    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    x, _ = task.batch(0)
    route_as_the_run(model, config, x)
    layers = {name: mod for name, mod in model.named_modules() if mod in moe_layers(model)}
    for moe in layers.values():
        moe.record, moe.record_key = {}, 0
    model(x)
    return {name: {g: chosen for (_, g), chosen in moe.record.items()} for name, moe in layers.items()}


def assert_same_routing(result):
    """The run's routers chose and dropped what one process routing the same groups does."""
    c = result.config
    want = reference_routing(c)
    assert result.routing is not None and set(result.routing) == set(want), (sorted(result.routing or ()), sorted(want))
    for name, by_place in result.routing.items():
        assert len(by_place) == len(want[name]), f"{name}: {len(by_place)} groups routed, {len(want[name])} expected"
        for (dp, cp, mb), (choices, slots) in by_place.items():
            ref_choices, ref_slots = want[name][group_of(dp, mb, cp, m=c.m, cp=getattr(c, "cp", 1))]
            assert torch.equal(choices, ref_choices), f"{name} dp={dp} cp={cp} micro-batch {mb}: other experts chosen"
            assert torch.equal(slots, ref_slots), f"{name} dp={dp} cp={cp} micro-batch {mb}: other choices dropped"
    return sum(int((slots < 0).sum()) for by in result.routing.values() for _, slots in by.values())
