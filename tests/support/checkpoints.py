"""A checkpoint of a small MLP on one rank, for the checkpoint tests (tests/engine/test_checkpoint_*.py)."""

import pytest
import torch
import torch.distributed as dist

from minipipe.engine import checkpoint
from minipipe.engine.config import RunConfig, prepare
from minipipe.models import make_task

CONFIG = RunConfig(p=1, m=2, model="mlp", model_args={"width": 8, "depth": 2}, batch_size=4, steps=5)


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def saved(tmp_path, one_rank_group):
    """A checkpoint after 2 steps of CONFIG, written by checkpoint.save; returns (folder, params)."""
    root = str(tmp_path / "ckpt")
    plan = prepare(CONFIG.replace(checkpoint_dir=root))
    model = torch.nn.Sequential(*make_task("mlp", batch_size=4, width=8, depth=2).layers())
    named = dict(model.named_parameters())
    optimizer = torch.optim.Adam(named.values(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    checkpoint.save(root, 2, 0, named, optimizer, plan.meta)
    return root, {k: v.detach().clone() for k, v in named.items()}


def resume(root):
    return prepare(CONFIG.replace(checkpoint_dir=root, resume=True))


def save_step(root, step, params=None):
    """Another checkpoint in `root`, of CONFIG's model, after `step` steps."""
    plan = prepare(CONFIG)
    model = torch.nn.Sequential(*make_task("mlp", batch_size=4, width=8, depth=2).layers())
    named = dict(model.named_parameters())
    checkpoint.save(root, step, 0, named, torch.optim.SGD(named.values(), lr=0.1), plan.meta)
