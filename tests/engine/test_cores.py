"""Pinned ranks claim their cores: two runs on one machine never pin onto the same core, a run pins
only inside the cores its process was given, a killed run frees its cores, and a run that finds no
free core runs unpinned and says why."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minipipe.engine.cores import FOLDER_ENV, claim_cores

REPO = Path(__file__).resolve().parents[2]


def test_claims_take_free_cores_in_order_and_never_the_same_one(tmp_path):
    first = claim_cores(2, allowed=[4, 5, 6, 7], folder=tmp_path)
    second = claim_cores(2, allowed=[4, 5, 6, 7], folder=tmp_path)
    assert first.cores == (4, 5) and second.cores == (6, 7) and first.note is second.note is None
    third = claim_cores(1, allowed=[4, 5, 6, 7], folder=tmp_path)
    assert third.cores == () and "4 cores this process may use (cores 4-7) are pinned by other runs" in third.note
    first.release()
    assert claim_cores(2, allowed=[4, 5, 6, 7], folder=tmp_path).cores == (4, 5)  # freed, taken again


def test_a_claim_is_all_or_nothing(tmp_path):
    held = claim_cores(1, allowed=[0, 1], folder=tmp_path)
    assert held.cores == (0,)
    both = claim_cores(2, allowed=[0, 1], folder=tmp_path)
    assert both.cores == () and "2 ranks need a free core each, but 1 of the 2 cores" in both.note
    assert claim_cores(1, allowed=[0, 1], folder=tmp_path).cores == (1,)  # the failed claim kept nothing


def test_more_ranks_than_the_process_may_use_are_not_pinned_and_it_is_said(tmp_path):
    claim = claim_cores(3, allowed=[2, 3], folder=tmp_path)
    assert claim.cores == () and claim.note.startswith(
        "not pinned to cores: 3 ranks but 2 cores for this process (cores 2, 3)"
    )


HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from minipipe.engine.cores import claim_cores
    claim = claim_cores(1, allowed=[int(sys.argv[1])], folder=Path(sys.argv[2]))
    print(claim.cores, flush=True)
    time.sleep(60)
""")


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_a_killed_run_frees_its_cores(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, "3", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert holder.stdout.readline().strip() == "(3,)"
        assert claim_cores(1, allowed=[3], folder=tmp_path).cores == ()  # held by the other process
        holder.send_signal(signal.SIGKILL)  # no clean-up runs
        holder.wait(10)
        assert claim_cores(1, allowed=[3], folder=tmp_path).cores == (3,)
    finally:
        holder.kill()
        holder.wait()


# -- whole launches, each in its own process, at the same time -----------------------------------------
def report_cores(work, rank, report, status):
    """A worker body: wait until told to go (so that the launches overlap), then say where it ran."""
    go = Path(work)
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(os.sched_getaffinity(0))


LAUNCH = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from minipipe.engine.workers import Job, launch
    from test_cores import report_cores
    notes = []
    out = launch([Job(sys.argv[1], pin_cores=True, startup_timeout=60)], 1, report_cores,
                 lambda e: e["kind"] == "note" and notes.append(e["text"]))
    print(out[(0, 0)], notes, flush=True)
""")


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_concurrent_launches_pin_onto_different_cores_and_one_more_runs_unpinned(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    allowed = cores[:2]
    env = dict(os.environ, PYTHONPATH=str(REPO), **{FOLDER_ENV: str(tmp_path / "locks")})
    go = tmp_path / "go"

    def start(go):  # each launch's process may use the same two cores; its worker returns once `go` exists
        return subprocess.Popen(
            [
                "taskset",
                "-c",
                ",".join(map(str, allowed)),
                sys.executable,
                "-c",
                LAUNCH,
                str(go),
                str(Path(__file__).parent),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    runs = [start(go), start(go)]
    try:
        locks = tmp_path / "locks"
        deadline = time.monotonic() + 90  # both hold their claims (their workers are starting or waiting)
        while time.monotonic() < deadline and not _held(locks, allowed):
            time.sleep(0.1)
        if not _held(locks, allowed):
            for r in runs:
                r.kill()
            pytest.fail(
                "the two launches did not both claim a core:\n" + "\n".join(r.communicate()[1][-2000:] for r in runs)
            )
        (tmp_path / "now").touch()
        third = start(tmp_path / "now")  # the two cores are both taken now
        runs.append(third)
        out3, err3 = third.communicate(timeout=120)
        go.touch()
        outs = [r.communicate(timeout=120)[0] for r in runs[:2]]
    finally:
        go.touch()
        for r in runs:
            r.kill()
            r.wait()
    pinned = [eval(out.split("] ", 1)[0] + "]") for out in outs]
    assert sorted(map(tuple, pinned)) == [(allowed[0],), (allowed[1],)], outs  # one core each, not the same
    assert "[]" in outs[0] and "[]" in outs[1]  # pinned: nothing to say
    assert eval(out3.split("] ", 1)[0] + "]") == allowed, (out3, err3)  # unpinned: its whole affinity
    assert "are pinned by other runs on this machine" in out3


def _held(folder: Path, cores) -> bool:
    """Every core in `cores` has its lock file held by some process."""
    if not folder.exists():
        return False
    free = claim_cores(1, allowed=list(cores), folder=folder)
    free.release()
    return free.cores == ()
