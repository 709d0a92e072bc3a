"""The course models: deterministic, cut-anywhere layer lists whose synthetic tasks are learnable."""

import pytest
import torch

from minipipe.models import make_task


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_same_seed_same_weights_and_data(name):
    a, b = make_task(name, seed=3), make_task(name, seed=3)
    for la, lb in zip(a.layers(), b.layers()):
        for pa, pb in zip(la.parameters(), lb.parameters()):
            assert torch.equal(pa, pb)
    assert all(torch.equal(u, w) for u, w in zip(a.batch(5), b.batch(5)))
    assert not torch.equal(a.batch(5)[0], a.batch(6)[0])
    other = make_task(name, seed=4).layers()[0]
    assert not all(torch.equal(p, q) for p, q in zip(a.layers()[0].parameters(), other.parameters()))


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_building_does_not_touch_the_global_rng(name):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_task(name).layers()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("name,kw", [("mlp", {}), ("gpt", {})])
def test_a_few_hundred_steps_learn(name, kw):
    torch.manual_seed(0)
    task = make_task(name, **kw)
    model = torch.nn.Sequential(*task.layers())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(200):
        x, y = task.batch(step)
        loss = task.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) / 20 < 0.3 * sum(losses[:5]) / 5


@pytest.mark.parametrize(
    "name,size,message",
    [
        ("resnet", {}, "unknown model 'resnet'; choose one of mlp, gpt"),
        ("mlp", {"layers": 3}, "has no setting layers"),
        ("mlp", {"width": 0}, "whole number >= 1"),
        ("gpt", {"width": 30, "heads": 4}, "multiple of heads"),
    ],
)
def test_bad_model_settings(name, size, message):
    with pytest.raises(ValueError, match=message):
        make_task(name, **size)
