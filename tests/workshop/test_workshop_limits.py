"""One participant's runaway run cannot take the room down: each participant's memory and tasks
(minipipe/workshop/limits.py) — their shares, the cgroup tree they are written to (v1 and v2, on fake trees), and, where
this machine lets the tests make cgroups, the kernel enforcing them on real processes."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from minipipe.cli import main
from minipipe.workshop.limits import GIB, Cgroups, Limits, describe_enforcement, memory_warning, room_id, room_limits
from minipipe.workshop.slices import make_slices

ROOM = room_id("/srv/room")
try:  # imported here, not in a test: importing JupyterHub runs `ldconfig -p` (a process)
    from minipipe.workshop.hub import proxy_command
except ImportError:
    proxy_command = None


# -- shares -------------------------------------------------------------------------------------
def test_memory_is_shared_equally_after_the_hubs_share_and_the_teacher_may_set_it():
    room = make_slices([f"p{i:02d}" for i in range(1, 21)], list(range(64)), 0)
    limits = room_limits(room, 512 * GIB)
    assert {lim.memory for lim in limits.values()} == {int(512 * GIB * 0.9) // 20}  # the hub keeps a tenth
    assert limits["p01"].cores == (0, 1, 2) and limits["p01"].tasks == 1024
    small = room_limits(make_slices(["ada", "alan"], [0, 1], 0), 8 * GIB)
    assert {lim.memory for lim in small.values()} == {3 * GIB}  # ... at least 2 GiB
    assert room_limits(room, 512 * GIB, per_participant=4 * GIB)["p20"].memory == 4 * GIB
    with pytest.raises(ValueError, match="more than this machine's 512 GiB; give at most 23.0"):
        room_limits(room, 512 * GIB, per_participant=30 * GIB)
    with pytest.raises(ValueError, match="too few for a JupyterLab server"):
        room_limits(room, 512 * GIB, tasks=10)


def test_a_share_too_small_for_the_lessons_is_said_before_the_day():
    assert "invite fewer" in memory_warning(room_limits(make_slices(["a", "b", "c", "d"], [0, 1, 2, 3], 0), 8 * GIB))
    assert memory_warning(room_limits(make_slices(["a", "b"], [0, 1], 0), 64 * GIB)) is None


def test_two_rooms_on_one_machine_get_two_cgroups():
    assert room_id("/srv/room") != room_id("/srv/other") and room_id("/srv/room") == room_id("/srv/room/")


# -- where the cgroups go (fake trees) -----------------------------------------------------------
def fake_proc(tmp_path, mounts: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mounts").write_text(mounts)
    (proc / "cgroup").write_text(cgroup)
    return proc


def test_v1_memory_pids_and_cpuset_under_the_hubs_own_cgroups(tmp_path):
    fs = tmp_path / "cg"
    mounts = "".join(f"cgroup {fs}/{c} cgroup rw,relatime,{c} 0 0\n" for c in ("cpu", "memory", "pids", "cpuset"))
    proc = fake_proc(tmp_path, mounts, "4:memory:/job/7\n8:pids:/\n3:cpuset:/\n1:cpu:/\n0::/\n")
    for c, own in (("memory", "job/7"), ("pids", ""), ("cpuset", "")):
        (fs / c / own).mkdir(parents=True, exist_ok=True)
    (fs / "cpuset" / "cpuset.mems").write_text("0\n")
    (fs / "cpuset" / "cpuset.cpus").write_text("0-7\n")
    groups = Cgroups.find(ROOM, str(proc))
    assert groups.version == 1 and groups.bases["memory"] == fs / "memory" / "job" / "7" / ROOM
    for folder in (groups.bases["cpuset"], groups.folders("ada")["cpuset"]):  # what a v1 kernel makes in a new cpuset
        folder.mkdir(parents=True)
        (folder / "cpuset.mems").write_text("")
    groups.make("ada", Limits(3 * GIB, 512, (2, 3)))
    ada = groups.folders("ada")
    assert (ada["memory"] / "memory.limit_in_bytes").read_text() == str(3 * GIB)
    assert (ada["memory"] / "memory.memsw.limit_in_bytes").read_text() == str(3 * GIB)  # no swap beyond it
    assert (ada["pids"] / "pids.max").read_text() == "512"
    assert (ada["cpuset"] / "cpuset.cpus").read_text() == "2,3" and (ada["cpuset"] / "cpuset.mems").read_text() == "0"
    assert (groups.bases["cpuset"] / "cpuset.cpus").read_text() == "0-7"  # the room's: all the hub has
    assert "cgroup v1" in describe_enforcement(groups)


def test_v2_a_room_beside_the_hubs_cgroup_with_its_controllers(tmp_path):
    fs = tmp_path / "cg"
    (fs / "user.slice" / "hub.scope").mkdir(parents=True)
    (fs / "user.slice" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    proc = fake_proc(tmp_path, f"cgroup2 {fs} cgroup2 rw 0 0\n", "0::/user.slice/hub.scope\n")
    groups = Cgroups.find(ROOM, str(proc))
    assert groups.version == 2 and groups.bases == {"": fs / "user.slice" / ROOM}
    base = groups.bases[""]
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset memory pids\n")
    (base / "ada").mkdir()
    (base / "ada" / "cpuset.cpus").write_text("")
    groups.make("ada", Limits(2 * GIB, 256, (0,)))
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpuset"
    assert [(base / "ada" / f).read_text() for f in ("memory.max", "memory.swap.max", "pids.max", "cpuset.cpus")] == [
        str(2 * GIB),
        "0",
        "256",
        "0",
    ]


def test_no_cgroups_without_a_memory_controller_or_write_access_and_the_report_says_so(tmp_path):
    fs = tmp_path / "cg"
    (fs / "user.slice").mkdir(parents=True)
    (fs / "user.slice" / "cgroup.controllers").write_text("cpu io\n")  # memory not delegated
    proc = fake_proc(tmp_path, f"cgroup2 {fs} cgroup2 rw 0 0\n", "0::/user.slice/hub.scope\n")
    assert Cgroups.find(ROOM, str(proc)) is None
    assert describe_enforcement(None).startswith("NOT enforced")


def test_the_room_report_names_the_limits_and_how_they_are_enforced(tmp_path, capsys):
    if proxy_command is None:
        pytest.skip("JupyterHub is the workshop extra: pip install -e '.[workshop]'")
    try:
        proxy_command()
    except ValueError:
        pytest.skip("configurable-http-proxy is not installed (make workshop-setup)")
    assert (
        main(
            [
                "workshop",
                "start",
                "--names",
                "ada",
                "--room",
                str(tmp_path / "room"),
                "--memory",
                "2",
                "--max-tasks",
                "300",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "limits per participant (their server, kernels and ranks together): 2.0 GiB, 300 tasks" in out
    assert "enforced by the kernel" in out or "NOT enforced" in out
    assert (
        main(
            ["workshop", "start", "--names", "ada", "--room", str(tmp_path / "room"), "--memory", "100000", "--dry-run"]
        )
        == 2
    )
    assert "more than this machine's" in capsys.readouterr().err


# -- the kernel enforcing them (where the tests may make cgroups) ---------------------------------
def real_cgroups(tmp_path) -> Cgroups:
    groups = Cgroups.find(room_id(tmp_path))
    if groups is None:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail("CI runs as root, where the room's cgroups can be made: " + describe_enforcement(None))
        pytest.skip(describe_enforcement(None))
    return groups


def run_in(groups: Cgroups, name: str, code: str, timeout: float = 60) -> int:
    """Fork a child that joins `name`'s cgroup and runs `code`: its exit code (-N: killed by signal N)."""
    pid = os.fork()
    if pid == 0:
        try:
            groups.join(name)
            exec(code, {})
            os._exit(0)
        except BaseException as e:  # noqa: BLE001 (the parent reads the exit code)
            print(f"child: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            os._exit(3)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise TimeoutError(code)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_participant_past_their_memory_is_stopped_and_nobody_else_is(tmp_path):
    groups = real_cgroups(tmp_path)
    cores = tuple(sorted(os.sched_getaffinity(0)))
    try:
        groups.make("ada", Limits(256 * 2**20, 256, cores))
        groups.make("alan", Limits(256 * 2**20, 256, cores))
        # ada's run touches 1 GiB: the kernel kills it, inside her share
        assert (
            run_in(groups, "ada", "b = bytearray(2**30)\nfor i in range(0, len(b), 4096): b[i] = 1") == -signal.SIGKILL
        )
        # alan, at the same moment, uses 100 MiB and is untouched
        assert run_in(groups, "alan", "b = bytearray(100 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1") == 0
        # and outside the room (the hub, this test) the same 1 GiB is fine
        b = bytearray(2**30)
        del b
    finally:
        for name in ("ada", "alan"):
            groups.kill(name)
        time.sleep(0.2)
        for name in ("ada", "alan"):
            groups.remove(name)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_loop_that_starts_processes_stops_at_the_participants_task_limit(tmp_path):
    groups = real_cgroups(tmp_path)
    try:
        groups.make("ada", Limits(GIB, 64, tuple(sorted(os.sched_getaffinity(0)))))
        bomb = (
            "import os, time\nkids = []\ntry:\n    for _ in range(500):\n        pid = os.fork()\n"
            "        if pid == 0:\n            time.sleep(30); os._exit(0)\n        kids.append(pid)\n"
            "except OSError:\n    pass\nopen(%r, 'w').write(str(len(kids)))\n"
            "for k in kids: os.kill(k, 9)\nfor k in kids: os.waitpid(k, 0)\n"
        ).replace("%r", repr(str(tmp_path / "forked")))
        assert run_in(groups, "ada", bomb) == 0
        forked = int((tmp_path / "forked").read_text())
        assert 0 < forked < 64, forked  # stopped at the limit, not at 500
        assert run_in(groups, "nobody", "pass") == 3  # joining a cgroup never made fails: no unlimited server
    finally:
        groups.kill("ada")
        time.sleep(0.2)
        groups.remove("ada")
