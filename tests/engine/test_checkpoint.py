"""Checkpoint and resume: a killed run continues exactly where its last checkpoint left it."""

import os
import shutil
import subprocess
import sys

import pytest

from minipipe.engine import checkpoint, folder_lock
from minipipe.engine.config import RunConfig
from minipipe.engine.diagnosis import WorkerError
from minipipe.engine.launch import run

pytestmark = pytest.mark.distributed

BASE = RunConfig(
    schedule="1f1b",
    p=2,
    m=4,
    model="gpt",
    model_args={"width": 16, "depth": 2, "block": 8},
    batch_size=8,
    steps=20,
    optimizer="adam",
    lr=3e-3,
    timeout=20,
)


@pytest.fixture(scope="module")
def uninterrupted():
    return run(BASE).losses


def killed(ckpt: str, every: int, fault: dict):
    """Train with checkpoints until rank 1 exits at `fault`; return the newest checkpoint's
    name and how to resume from it."""
    with pytest.raises(WorkerError, match="rank 1 died"):
        run(BASE.replace(checkpoint_dir=ckpt, checkpoint_every=every, fault={"rank": 1, "kind": "exit", **fault}))
    resume = lambda: run(BASE.replace(checkpoint_dir=ckpt, checkpoint_every=every, resume=True))  # noqa: E731
    return os.path.basename(checkpoint.latest(ckpt)), resume


@pytest.mark.timeout(180)
def test_kill_and_resume_gives_the_uninterrupted_losses(tmp_path, uninterrupted):
    newest, resume = killed(str(tmp_path / "ckpt"), 10, {"step": 13, "action": "1F2"})
    assert newest == "step-000010"
    resumed = resume()
    assert resumed.first_step == 10
    assert resumed.losses == uninterrupted[10:]


@pytest.mark.timeout(180)
def test_resume_with_another_schedule(tmp_path, uninterrupted):
    ckpt = str(tmp_path / "ckpt")
    run(BASE.replace(steps=10, checkpoint_dir=ckpt))
    resumed = run(BASE.replace(schedule="interleaved", v=2, checkpoint_dir=ckpt, resume=True))
    assert resumed.first_step == 10
    assert resumed.losses == pytest.approx(uninterrupted[10:], rel=1e-5)


@pytest.mark.timeout(180)
def test_a_kill_while_saving_leaves_the_previous_checkpoint(tmp_path, uninterrupted):
    ckpt = str(tmp_path / "ckpt")
    newest, resume = killed(ckpt, 5, {"step": 10, "action": "save"})
    assert newest == "step-000005"
    assert os.path.isdir(os.path.join(ckpt, "step-000010.tmp"))  # the torn one is left aside
    resumed = resume()
    assert resumed.first_step == 5 and resumed.losses == uninterrupted[5:]


@pytest.mark.timeout(120)
def test_same_seed_same_bits(uninterrupted):
    assert run(BASE).losses == uninterrupted
    assert run(BASE.replace(seed=1)).losses != uninterrupted


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KiB disk of its own (tmpfs): room for one checkpoint of BASE (~150 KB), not two."""
    import subprocess

    where = tmp_path / "disk"
    where.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs to mount a small tmpfs (root)")
    yield str(where)
    subprocess.run(["umount", str(where)], check=True)


@pytest.mark.timeout(180)
def test_a_disk_that_fills_up_while_saving_says_so(small_disk):
    ckpt = os.path.join(small_disk, "ckpt")
    with pytest.raises(
        WorkerError,
        match=r"saving the checkpoint of step 4 in .* failed: no space left on device "
        r".*the disk is full.*step-000002, is untouched",
    ):
        run(BASE.replace(steps=4, checkpoint_every=2, checkpoint_dir=ckpt))
    assert checkpoint.newest(ckpt)[0].endswith("step-000002")


@pytest.mark.timeout(180)
def test_a_step_mixing_two_steps_files_is_skipped_and_training_matches_the_uninterrupted_run(tmp_path, uninterrupted):
    ckpt = str(tmp_path / "ckpt")
    run(BASE.replace(steps=10, checkpoint_every=5, checkpoint_dir=ckpt))
    # rank 1's file of step 5 in step 10's folder: trained on, the mixture's losses would differ
    shutil.copy(os.path.join(ckpt, "step-000005", "rank1.pt"), os.path.join(ckpt, "step-000010", "rank1.pt"))
    notes = []
    resumed = run(
        BASE.replace(checkpoint_dir=ckpt, resume=True),
        progress=lambda e: e["kind"] == "note" and notes.append(e["text"]),
    )
    assert "rank1.pt holds step 5, not step 10" in "\n".join(notes)
    assert resumed.first_step == 5 and resumed.losses == uninterrupted[5:]


@pytest.mark.timeout(60)
def test_a_dead_runs_lock_is_let_go(tmp_path):
    """The lock goes with its process, however it dies (here SIGKILL): one child, bounded by a timeout."""
    root = str(tmp_path / "ckpt")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from minipipe.engine import folder_lock; "
            "folder_lock.hold(sys.argv[1]); print('held', flush=True); time.sleep(60)",
            root,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(checkpoint.CheckpointError, match=rf"in use by another run \(pid {holder.pid} on "):
            folder_lock.hold(root)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    folder_lock.hold(root).release()
