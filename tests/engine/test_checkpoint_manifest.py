"""What belongs to a step: rank files of another step, or of another run of the same model, or
changed since they were saved, are named and never resumed from; a step without a manifest (an
older minipipe's) is read with a word; a rank file that lacks a parameter is refused before any
process starts; a checkpoint folder is one run's at a time."""

import json
import os
import shutil
from collections import defaultdict

import pytest
import torch

import minipipe.engine.workers as workers
from minipipe.engine import checkpoint, folder_lock
from minipipe.engine.checkpoint import CheckpointError
from minipipe.engine.config import prepare
from minipipe.engine.launch import run, run_many
from minipipe.models import make_task
from tests.support.checkpoints import CONFIG, resume, save_step


def step_file(root, step):
    return os.path.join(root, f"step-{step:06d}", "rank0.pt")


def meta_of(root, step):
    return os.path.join(root, f"step-{step:06d}", "meta.json")


def edit_meta(root, step, change):
    with open(meta_of(root, step)) as f:
        meta = json.load(f)
    change(meta)
    with open(meta_of(root, step), "w") as f:
        json.dump(meta, f)


def another_run(tmp_path, step=2):
    """A checkpoint of CONFIG's model after `step` steps, saved by a run of its own (its own run id)."""
    root = str(tmp_path / "other")
    plan = prepare(CONFIG.replace(checkpoint_dir=root))
    model = torch.nn.Sequential(*make_task("mlp", batch_size=4, width=8, depth=2).layers())
    named = dict(model.named_parameters())
    checkpoint.save(root, step, 0, named, torch.optim.SGD(named.values(), lr=0.1), plan.meta)
    return root, plan.meta["run_id"]


def run_id(root, step):
    with open(meta_of(root, step)) as f:
        return json.load(f)["run_id"]


def test_each_step_records_its_run_and_every_rank_file(saved):
    root, _ = saved
    with open(meta_of(root, 2)) as f:
        meta = json.load(f)
    assert meta["step"] == 2 and len(meta["run_id"]) == 16
    assert set(meta["files"]) == {"rank0.pt"}
    assert meta["files"]["rank0.pt"]["bytes"] == os.path.getsize(step_file(root, 2))
    state = checkpoint.read_rank_file(step_file(root, 2))
    assert state["run_id"] == meta["run_id"] and state["step"] == 2


def test_a_resumed_run_keeps_its_run_id_and_a_fresh_one_gets_its_own(saved, tmp_path):
    root, _ = saved
    assert resume(root).meta["run_id"] == run_id(root, 2)
    assert prepare(CONFIG.replace(checkpoint_dir=str(tmp_path / "new"))).meta["run_id"] != run_id(root, 2)


def test_a_rank_file_of_another_step_is_named_and_the_step_skipped(saved):
    root, _ = saved
    save_step(root, 4)
    shutil.copy(step_file(root, 2), step_file(root, 4))
    plan = resume(root)
    assert plan.resume_from.endswith("step-000002")
    assert "step-000004 (" in plan.note and "rank0.pt holds step 2, not step 4" in plan.note


def test_a_rank_file_of_another_run_of_the_same_model_is_named(saved, tmp_path):
    root, _ = saved
    other, other_id = another_run(tmp_path)
    shutil.copy(step_file(other, 2), step_file(root, 2))
    with pytest.raises(
        CheckpointError,
        match=rf"rank0\.pt was written by run {other_id}, this step by run "
        rf"{run_id(root, 2)}: it is another run's file",
    ):
        resume(root)


def test_a_rank_file_changed_after_it_was_saved_is_named(saved):
    root, _ = saved
    weight = checkpoint.read_rank_file(step_file(root, 2))["params"]["0.linear.weight"]
    with open(step_file(root, 2), "rb") as f:
        data = f.read()
    at = data.find(weight.numpy().tobytes())  # the tensor's bytes, stored as they are (torch.save's zip)
    assert at > 0
    changed = (weight + 1).numpy().tobytes()  # same step, same run, same size: only the hash tells
    with open(step_file(root, 2), "wb") as f:
        f.write(data[:at] + changed + data[at + len(changed) :])
    assert os.path.getsize(step_file(root, 2)) == len(data)
    assert torch.equal(checkpoint.read_rank_file(step_file(root, 2))["params"]["0.linear.weight"], weight + 1)
    with pytest.raises(
        CheckpointError,
        match=r"rank0\.pt is not the file this step recorded \(\d+ bytes, sha256 "
        r"[0-9a-f]{12}\.\.\.; it has \d+ bytes.*changed or replaced",
    ):
        resume(root)


def test_a_manifest_that_misses_a_writer_is_named(saved):
    root, _ = saved
    edit_meta(root, 2, lambda meta: meta["files"].pop("rank0.pt"))
    with pytest.raises(CheckpointError, match=r"manifest lists no file but the run's writers wrote rank0\.pt"):
        resume(root)


def without_manifest(root, step):
    """The step as a minipipe before manifests wrote it: no run ids, no files in meta.json."""
    edit_meta(root, step, lambda meta: (meta.pop("files"), meta.pop("run_id")))
    state = checkpoint.read_rank_file(step_file(root, step))
    state.pop("run_id")
    torch.save(state, step_file(root, step))


def test_a_step_without_a_manifest_is_read_with_a_word(saved):
    root, _ = saved
    without_manifest(root, 2)
    plan = resume(root)
    assert plan.resume_from.endswith("step-000002")
    assert (
        "step-000002 has no manifest" in plan.note
        and "checked to hold step 2, but not against their sizes" in plan.note
    )
    assert len(plan.meta["run_id"]) == 16  # its steps from now on have one


def test_a_step_without_a_manifest_is_still_checked_for_its_step(saved):
    root, _ = saved
    save_step(root, 4)
    without_manifest(root, 4)
    shutil.copy(step_file(root, 2), step_file(root, 4))
    plan = resume(root)
    assert plan.resume_from.endswith("step-000002") and "rank0.pt holds step 2, not step 4" in plan.note


def test_a_rank_file_missing_one_parameter_is_refused_before_any_process_starts(saved, monkeypatch):
    root, _ = saved
    state = checkpoint.read_rank_file(step_file(root, 2))
    del state["params"]["1.linear.bias"]  # a consistent step, written without one parameter
    torch.save(state, step_file(root, 2))
    edit_meta(root, 2, lambda meta: meta["files"].update({"rank0.pt": checkpoint.manifest.entry(step_file(root, 2))}))
    monkeypatch.setattr(workers, "launch", lambda *a, **k: pytest.fail("processes were started"))
    with pytest.raises(
        CheckpointError, match=r"rank files in .* lack parameters its meta\.json lists \(\['1\.linear\.bias'\]\)"
    ):
        run(CONFIG.replace(checkpoint_dir=root, resume=True))


# -- one run at a time in a folder ------------------------------------------------------------
@pytest.fixture
def no_launch(monkeypatch):
    started = []
    monkeypatch.setattr(workers, "launch", lambda jobs, *a, **k: started.append(jobs) or defaultdict(lambda: None))
    monkeypatch.setattr("minipipe.engine.launch.collect", lambda plan, ranks: plan)
    return started


def test_a_folder_in_use_is_refused_naming_the_run_that_holds_it(tmp_path, no_launch):
    root = str(tmp_path / "ckpt")
    held = folder_lock.hold(root)
    try:
        with pytest.raises(
            CheckpointError,
            match=rf"checkpoint_dir '.*ckpt' is in use by another run \(pid "
            rf"{os.getpid()} on .*, since .*\): two runs in one folder",
        ):
            run(CONFIG.replace(checkpoint_dir=root))
        assert not no_launch
    finally:
        held.release()
    run(CONFIG.replace(checkpoint_dir=root))  # free again: the run starts
    assert len(no_launch) == 1


def test_the_lock_is_held_while_the_run_runs_and_let_go_after(tmp_path, monkeypatch):
    root = str(tmp_path / "ckpt")
    seen = []

    def launch(jobs, *a, **k):
        with pytest.raises(CheckpointError, match="in use by another run"):
            folder_lock.hold(root)
        seen.append(True)
        raise RuntimeError("the run failed")

    monkeypatch.setattr(workers, "launch", launch)
    with pytest.raises(RuntimeError, match="the run failed"):
        run(CONFIG.replace(checkpoint_dir=root))
    assert seen
    folder_lock.hold(root).release()  # a failed run lets go of it too


def test_a_run_that_saved_while_this_one_was_planned_is_seen(saved, no_launch, monkeypatch):
    root, _ = saved
    planned = prepare(CONFIG.replace(checkpoint_dir=root, resume=True))
    save_step(root, 4)  # another run saves in between
    monkeypatch.setattr("minipipe.engine.launch.prepare", lambda c: planned)
    with pytest.raises(
        CheckpointError,
        match=r"changed while this run was being planned \(it would resume from "
        r".*step-000004, planned from .*step-000002\)",
    ):
        run(CONFIG)
    assert not no_launch


def test_two_runs_in_one_call_may_not_share_a_folder(tmp_path, no_launch):
    root = str(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="two of these runs save to one checkpoint_dir"):
        run_many([CONFIG.replace(checkpoint_dir=root), CONFIG.replace(checkpoint_dir=root + "/", seed=1)])
    assert not no_launch
