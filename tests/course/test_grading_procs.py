"""Ending every process of a grading (minipipe/course/grading/procs.py): the tree under the judge,
a child that put itself in a session of its own (setsid) and was orphaned by a double fork, and a
process that keeps forking while it is being stopped."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from minipipe.course.grading import procs

ESCAPES = """
import os, subprocess, sys, time
# a child in a session of its own, then orphaned: it outlives its parent, belongs to no group of ours
subprocess.Popen([sys.executable, "-c", "import subprocess, sys\\n"
                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)"],
                 start_new_session=True)
if os.fork() == 0:                 # and one that keeps forking while it is stopped (bounded: never a fork bomb)
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        time.sleep(0.05)
    os._exit(0)
time.sleep(600)
"""


def _alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    out.append(pid)
        except FileNotFoundError:
            pass
    return out


@pytest.mark.distributed
@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_end_all_stops_a_tree_with_setsid_and_orphaned_children():
    token = uuid.uuid4().hex
    root = subprocess.Popen(
        [sys.executable, "-c", ESCAPES], env={**os.environ, procs.TOKEN: token}, start_new_session=True
    )
    deadline = time.monotonic() + 20
    while not (procs.members(None, token) - procs.descendants(root.pid) - {root.pid}) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    seen = procs.members(root.pid, token)
    escaped = seen - procs.descendants(root.pid) - {root.pid}
    assert escaped, "the orphan in a session of its own left the tree: only the token finds it"
    assert len(seen) >= 4, seen
    started = time.monotonic()
    procs.end_all(root.pid, token)
    root.wait(timeout=10)
    assert time.monotonic() - started < 10
    assert not _alive(seen), f"left running: {_alive(seen)}"
    assert not procs.members(None, token), "a carrier of the token is left"


def test_members_of_nothing_is_nobody():
    assert procs.members(None, uuid.uuid4().hex) == set()


ESCAPES_IN_A_CELL = """
import os, subprocess, sys
# as if the watch had been got round: a grandchild in a session of its own, its parent gone at once
child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys\\n"
                          "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
                          "start_new_session=True)\\n"
                          "print(p.pid, flush=True)"], stdout=subprocess.PIPE, text=True, start_new_session=True)
grandchild = int(child.stdout.readline())
child.wait()
with open(PIDS, "w") as f:
    f.write(str(grandchild))
"""


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_grading_leaves_no_process_even_one_in_a_session_of_its_own(tmp_path):
    from minipipe.course.grading.run import judge_in_process

    pids = tmp_path / "pids"
    cell = f"PIDS = {str(pids)!r}\n" + ESCAPES_IN_A_CELL  # a given cell: trusted, so nothing refuses it
    result = judge_in_process(
        {
            "check": "check_bubble_arithmetic",
            "targets": ["makespan", "bubble", "messages"],
            "cells": [("cell 1 (given)", False, cell)],
        },
        timeout=60,
    )
    assert pids.exists(), result
    grandchild = int(pids.read_text())
    assert not _alive([grandchild]), f"the orphan in a session of its own outlived its grading: {grandchild}"
