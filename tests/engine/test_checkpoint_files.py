"""A checkpoint is data, not code: rank files load as tensors only, and a missing, cut-short or
foreign file is refused before any process starts, with its name, what is wrong and what to do."""

import os
import pickle
from pathlib import Path

import pytest
import torch

from minipipe.engine import checkpoint
from minipipe.engine.checkpoint import CheckpointError
from minipipe.engine.config import prepare
from minipipe.models import make_task
from tests.support.checkpoints import CONFIG, resume, save_step


class RunsCode:
    """Unpickling this creates a file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


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
    data = Path(rank_file(root)).read_bytes()
    with open(rank_file(root), "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"rank0\.pt is not a checkpoint file: .*cut short.*fresh checkpoint_dir"):
        resume(root)


@pytest.mark.parametrize(
    "write",
    [
        lambda obj, path: torch.save({"step": 2, "params": obj, "optimizer": {}, "rng": torch.zeros(1)}, path),
        lambda obj, path: Path(path).write_bytes(pickle.dumps(obj)),
    ],
    ids=["torch.save", "pickle"],
)
def test_a_file_that_would_run_code_is_refused_unrun(saved, tmp_path, write):
    root, _ = saved
    marker = str(tmp_path / "code-ran")
    write(RunsCode(marker), rank_file(root))
    with pytest.raises(CheckpointError, match=r"rank0\.pt "):
        resume(root)  # before any process starts
    with pytest.raises(CheckpointError, match=r"rank0\.pt "):
        checkpoint.load(checkpoint.latest(root), {}, None)  # and in a worker, had the file changed since
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


# -- nothing saved is lost, nothing damaged is taken for "start from scratch" ----------------
def test_a_damaged_newest_step_resumes_from_the_newest_intact_one_and_says_which(saved):
    root, _ = saved
    save_step(root, 4)
    os.remove(os.path.join(root, "step-000004", "meta.json"))
    plan = resume(root)
    assert plan.resume_from == os.path.join(root, "step-000002")
    assert "step-000002" in plan.note and "step-000004" in plan.note and "meta.json is missing" in plan.note


def test_a_pointer_to_a_step_that_is_not_there_resumes_from_the_newest_intact_one(saved):
    root, _ = saved
    save_step(root, 4)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write("step-000009")
    assert resume(root).resume_from == os.path.join(root, "step-000004")


def test_only_damaged_steps_are_refused_never_restarted(saved):
    root, _ = saved
    os.remove(os.path.join(checkpoint.latest(root), "meta.json"))
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*step-000002: .*meta\.json is missing"):
        resume(root)


def test_a_folder_that_holds_checkpoints_is_not_overwritten_without_its_pointer(saved):
    root, _ = saved
    os.remove(os.path.join(root, "latest"))
    with pytest.raises(ValueError, match=r"already holds checkpoints \(step-000002\); pass resume=True"):
        prepare(CONFIG.replace(checkpoint_dir=root))


def test_saving_over_a_damaged_step_sets_it_aside(saved):
    root, _ = saved
    save_step(root, 4)
    os.remove(os.path.join(root, "step-000004", "meta.json"))
    assert resume(root).resume_from.endswith("step-000002")
    save_step(root, 4)  # the resumed run reaches step 4 again
    assert checkpoint.latest(root).endswith("step-000004") and resume(root).note is None
    assert os.listdir(os.path.join(root, "step-000004.damaged")) == ["rank0.pt"]  # kept, not deleted


def full_disk_at(monkeypatch, name):
    """Writing `name` in the next checkpoint folder made fails as on a full disk (it is /dev/full)."""
    made = os.makedirs

    def makedirs(path, *args, **kw):
        made(path, *args, **kw)
        if path.endswith(".tmp"):
            os.symlink("/dev/full", os.path.join(path, name))

    monkeypatch.setattr(checkpoint.os, "makedirs", makedirs)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("name", ["rank0.pt.part", "meta.json"])
def test_a_full_disk_while_saving_names_the_cause(saved, monkeypatch, name):
    root, _ = saved
    full_disk_at(monkeypatch, name)
    with pytest.raises(
        CheckpointError,
        match=r"saving the checkpoint of step 4 in .* failed: no space left on "
        r"device .*step-000002, is untouched",
    ):
        save_step(root, 4)
    assert checkpoint.latest(root).endswith("step-000002")


@pytest.mark.parametrize("where", ["{file}/ckpt", "/proc/ckpt"])
def test_an_unwritable_checkpoint_dir_is_refused_before_any_process_starts(tmp_path, where):
    (tmp_path / "file").write_text("not a folder")
    path = where.format(file=tmp_path / "file")
    with pytest.raises(ValueError, match="checkpoint_dir: .*(is a file|cannot write in)"):
        prepare(CONFIG.replace(checkpoint_dir=path))
