"""Faults injected into real runs: each is reported with the rank (and the action) within
seconds, no worker survives, and the next run in the same process works."""

import os
import signal
import threading
import time

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.diagnosis import WorkerError
from minipipe.engine.launch import run
from tests.support.processes import workers_alive

pytestmark = pytest.mark.distributed

BASE = RunConfig(
    schedule="1f1b", p=2, m=4, model="mlp", model_args={"width": 16, "depth": 4}, batch_size=8, steps=3, timeout=3.0
)


def fails(config, progress=None) -> tuple[WorkerError, float]:
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run(config, progress=progress)
    return info.value, time.monotonic() - start


def assert_clean_and_usable():
    deadline = time.monotonic() + 5
    while workers_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers_alive() == set(), "a worker process outlived the failed run"
    assert len(run(BASE.replace(steps=2)).losses) == 2


@pytest.mark.timeout(120)
def test_a_rank_that_raises():
    error, seconds = fails(BASE.replace(fault={"rank": 1, "step": 1, "action": "1F2", "kind": "raise"}))
    assert error.rank == 1 and error.step == 1 and error.action == "1F2"
    assert "injected fault at 1F2" in str(error) and "Traceback" in str(error)
    assert seconds < 30
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_a_rank_that_exits():
    error, seconds = fails(BASE.replace(fault={"rank": 0, "step": 0, "action": "0B1", "kind": "exit"}))
    assert error.rank == 0 and "died (exited with code 3)" in str(error) and "0B1" in str(error)
    assert seconds < 30
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_a_rank_killed_from_outside():
    pids = []

    def progress(event):
        if event["kind"] == "started":
            pids.extend(event["pids"])
        elif event["kind"] == "step" and event["step"] == 2:
            os.kill(pids[1], signal.SIGKILL)

    error, seconds = fails(BASE.replace(steps=10_000), progress)
    assert error.rank == 1 and "killed by signal 9" in str(error)
    assert error.step is not None and error.step >= 2
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_a_rank_that_stops_responding():
    error, seconds = fails(BASE.replace(fault={"rank": 1, "step": 0, "action": "1F1", "kind": "sleep"}))
    assert error.rank == 1 and error.action == "1F1"
    assert "rank 1 stopped responding in step 0 at action 1F1" in str(error)
    assert "timed out after 3 s" in str(error)
    assert seconds < 30
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_run_from_a_thread_leaves_nothing_behind():
    # a notebook may drive runs from a background thread (e.g. a widget's button)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", run(BASE.replace(steps=1))))
    t.start()
    t.join(60)
    assert len(out["r"].losses) == 1
    assert workers_alive() == set()


@pytest.mark.timeout(120)
def test_workers_leave_when_the_caller_is_killed(tmp_path):
    """A notebook kernel killed mid-run must not leave its workers behind."""
    import subprocess
    import sys

    script = (
        "from minipipe import run, RunConfig\n"
        "def progress(e):\n"
        "    if e['kind'] == 'started': print('PIDS', *e['pids'], flush=True)\n"
        "    if e['kind'] == 'step' and e['step'] == 2: print('TRAINING', flush=True)\n"
        f"run({BASE.replace(steps=1_000_000)!r}, progress=progress)\n"
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}
    )
    pids = []
    for line in caller.stdout:
        if line.startswith("PIDS"):
            pids = [int(x) for x in line.split()[1:]]
        if line.startswith("TRAINING"):
            break
    assert len(pids) == 2
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 15
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [pid for pid in pids if running(pid)]
    assert alive == [], f"workers {alive} outlived their killed caller"


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_a_hang_with_nobody_waiting_is_caught_by_the_watchdog():
    # one rank: no peer will ever time out waiting for it; the launcher's watchdog must
    error, seconds = fails(
        BASE.replace(p=1, timeout=2.0, fault={"rank": 0, "step": 1, "action": "0F1", "kind": "sleep"})
    )
    assert error.rank == 0 and error.step == 1 and error.action == "0F1"
    assert "rank 0 stopped responding in step 1 at action 0F1: no rank made progress" in str(error)
    assert seconds < 30
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_a_short_timeout_bounds_waits_in_a_step_not_the_start():
    # rank 0 is slow to start (7x the timeout): start-up has a timeout of its own, so the run trains
    slow_start = {"rank": 0, "step": 0, "action": "start", "kind": "sleep", "seconds": 1.5}
    assert len(run(BASE.replace(timeout=0.2, fault=slow_start)).losses) == 3
    # ...while a rank that stops inside a step for as long is the run's own error, which names it
    # (not gloo's "Timed out waiting 200ms", which its process group's own timeout would give)
    error, seconds = fails(
        BASE.replace(timeout=0.2, fault={"rank": 1, "step": 1, "action": "1F2", "kind": "sleep", "seconds": 1.5})
    )
    assert error.rank == 1 and error.step == 1 and error.action == "1F2"
    assert "rank 1 stopped responding in step 1 at action 1F2" in str(error) and "timed out after 0.2 s" in str(error)
    assert "Timed out waiting" not in str(error)
    assert_clean_and_usable()


@pytest.mark.timeout(120)
def test_a_rank_that_never_finishes_starting_is_named():
    error, seconds = fails(
        BASE.replace(startup_timeout=5.0, fault={"rank": 1, "step": 0, "action": "start", "kind": "sleep"})
    )
    assert error.rank == 1 and "rank 1 did not finish starting up" in str(error)
    assert "startup_timeout 5 s" in str(error) and "rank 0: at the start of step 0" in str(error)
    assert seconds < 40
    assert_clean_and_usable()
