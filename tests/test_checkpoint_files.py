"""A checkpoint is data, not code: rank files load as tensors only, and a missing, cut-short or
foreign file is refused before any process starts, with its name, what is wrong and what to do."""
import os
import pickle

import pytest
import torch
import torch.distributed as dist

from minipipe.engine import checkpoint
from minipipe.engine.checkpoint import CheckpointError
from minipipe.engine.config import RunConfig, prepare
from minipipe.models import make_task

CONFIG = RunConfig(p=1, m=2, model="mlp", model_args={"width": 8, "depth": 2}, batch_size=4, steps=5)


class RunsCode:
    """Unpickling this creates a file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


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


def rank_file(root):
    return os.path.join(checkpoint.latest(root), "rank0.pt")


def test_a_good_checkpoint_loads_as_tensors(saved):
    root, params = saved
    assert resume(root).resume_from == checkpoint.latest(root)
    model = torch.nn.Sequential(*make_task("mlp", batch_size=4, width=8, depth=2).layers())
    named = dict(model.named_parameters())
    optimizer = torch.optim.Adam(named.values(), lr=0.1)
    assert checkpoint.load(checkpoint.latest(root), named, optimizer) == 2
    for name, p in named.items():
        assert torch.equal(p, params[name])
        assert set(optimizer.state[p]) == {"step", "exp_avg", "exp_avg_sq"}


def test_a_cut_short_rank_file_is_named(saved):
    root, _ = saved
    data = open(rank_file(root), "rb").read()
    with open(rank_file(root), "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"rank0\.pt is not a checkpoint file: .*cut short.*fresh checkpoint_dir"):
        resume(root)


@pytest.mark.parametrize("write", [
    lambda obj, path: torch.save({"step": 2, "params": obj, "optimizer": {}, "rng": torch.zeros(1)}, path),
    lambda obj, path: pickle.dump(obj, open(path, "wb")),
], ids=["torch.save", "pickle"])
def test_a_file_that_would_run_code_is_refused_unrun(saved, tmp_path, write):
    root, _ = saved
    marker = str(tmp_path / "code-ran")
    write(RunsCode(marker), rank_file(root))
    with pytest.raises(CheckpointError, match=r"rank0\.pt "):
        resume(root)                                    # before any process starts
    with pytest.raises(CheckpointError, match=r"rank0\.pt "):
        checkpoint.load(checkpoint.latest(root), {}, None)   # and in a worker, had the file changed since
    assert not os.path.exists(marker), "loading the checkpoint ran code from it"


def test_a_file_with_objects_says_why_it_was_not_loaded(saved):
    root, _ = saved
    torch.save({"step": 2, "params": {}, "optimizer": {}, "rng": RunsCode("unused")}, rank_file(root))
    with pytest.raises(CheckpointError, match="Python objects other than tensors.*can run any code"):
        resume(root)


def test_a_missing_rank_file_is_named(saved):
    root, _ = saved
    os.remove(rank_file(root))
    with pytest.raises(CheckpointError, match=r"rank0\.pt is missing: every rank .* writes one file"):
        resume(root)


def test_another_torch_file_is_not_a_rank_file(saved):
    root, _ = saved
    torch.save({"weights": torch.zeros(2)}, rank_file(root))
    with pytest.raises(CheckpointError, match="not a minipipe rank file .*lacks step, params, optimizer, rng"):
        resume(root)


def test_a_damaged_meta_json_is_named(saved):
    root, _ = saved
    with open(os.path.join(checkpoint.latest(root), "meta.json"), "w") as f:
        f.write('{"step": 2, "param_')
    with pytest.raises(CheckpointError, match=r"meta\.json is not the JSON minipipe writes"):
        resume(root)
