"""The teacher's view of who runs what (`minipipe workshop status`) and a way to end one participant's
runs (`minipipe workshop stop NAME`): from synthetic process lists, then on real process trees shaped
as a hub's servers are (a server, its kernel, the kernel's runs, a run left behind by its parent)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minipipe.cli import main
from minipipe.workshop.procs import ROOM_ENV, Proc, kinds, room_processes, status_table, stop_runs

GIB = 2**30


def proc(pid, ppid, user, cmd="python", rss=GIB // 4, threads=10, core=0):
    return Proc(pid, ppid, user, rss, threads, core, frozenset({core}), cmd)


SLICES = {"ada": {"cores": [0, 1], "gpus": None}, "alan": {"cores": [2, 3], "gpus": None}}
LIMITS = {"ada": {"memory": 4 * GIB, "tasks": 512}, "alan": {"memory": 4 * GIB, "tasks": 512}}


def test_a_participants_processes_are_their_server_its_kernels_and_runs_below_or_left_behind():
    procs = [
        proc(10, 1, "ada", "python .venv/bin/jupyterhub-singleuser --allow-root"),
        proc(11, 10, "ada", "python -m ipykernel_launcher -f k.json"),
        proc(12, 11, "ada", core=1),
        proc(13, 12, "ada", core=1),
        proc(14, 1, "ada", core=3),  # a rank whose kernel died
        proc(20, 1, "alan", "python .venv/bin/jupyterhub-singleuser"),
    ]
    k = kinds(procs, "ada")
    assert [p.pid for p in k["server"]] == [10] and [p.pid for p in k["kernels"]] == [11]
    assert [p.pid for p in k["runs"]] == [12, 13, 14]
    table = status_table(procs, SLICES, LIMITS, counted={"ada": 77}).splitlines()
    assert table[0].split() == ["participant", "server", "kernels", "runs", "memory", "tasks", "slice", "runs", "on"]
    assert table[2].split()[:7] == ["ada", "pid", "10", "1", "3", "1.2/4.0", "GiB"]
    assert "77/512" in table[2] and "(outside its slice: core 3)" in table[2]  # the cgroup's count of tasks
    assert table[3].split()[:6] == ["alan", "pid", "20", "0", "0", "0.2/4.0"] and "10/512" in table[3]
    assert status_table([], SLICES).splitlines()[2].split()[:4] == ["ada", "stopped", "0", "0"]
    with_gpu = status_table([], {"ada": {"cores": [0, 1, 2], "gpus": [0]}}).splitlines()[2]
    assert with_gpu.split()[-4:] == ["0-2,", "GPU", "0", "-"], with_gpu


def tree(bin_dir: Path, room: Path, name: str, runs: int) -> subprocess.Popen:
    """A fake server for `name`: it starts a kernel, which starts `runs` runs and one more that is left
    behind (its parent exits at once), then sleeps."""
    kernel = (
        f"import subprocess, time\n"
        f"runs = [subprocess.Popen(['sleep', '120']) for _ in range({runs})]\n"
        f"subprocess.Popen(['sh', '-c', 'sleep 120 & exit 0']).wait()\n"
        f"time.sleep(120)\n"
    )
    (bin_dir / name).mkdir()
    server = bin_dir / name / "jupyterhub-singleuser"
    server.write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {kernel!r}])\ntime.sleep(120)\n"
    )
    env = dict(os.environ, JUPYTERHUB_USER=name, **{ROOM_ENV: str(room)})
    return subprocess.Popen([sys.executable, str(server)], env=env, start_new_session=True)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_stopping_one_participants_runs_leaves_their_kernel_and_everyone_else(tmp_path, capsys):
    room = tmp_path / "room"
    (room / "hub").mkdir(parents=True)
    (room / "hub" / "slices.json").write_text(json.dumps(SLICES))
    servers = {"ada": tree(tmp_path, room, "ada", 2), "alan": tree(tmp_path, room, "alan", 1)}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            procs = room_processes(room)
            if len(kinds(procs, "ada")["runs"]) == 3 and len(kinds(procs, "alan")["runs"]) == 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the fake servers did not start their runs: {procs}")
        ada = kinds(procs, "ada")
        assert [p.pid for p in ada["server"]] == [servers["ada"].pid] and len(ada["kernels"]) == 1
        assert sum(p.ppid not in {k.pid for k in ada["kernels"]} for p in ada["runs"]) == 1  # the one left behind
        assert room_processes(tmp_path / "another-room") == []

        assert main(["workshop", "status", "--room", str(room)]) == 0
        rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
        assert rows["ada"][:5] == ["ada", "pid", str(servers["ada"].pid), "1", "3"], rows
        assert rows["alan"][:5] == ["alan", "pid", str(servers["alan"].pid), "1", "2"], rows

        assert main(["workshop", "stop", "ada", "--room", str(room)]) == 0
        assert "ada: 3 processes of their runs stopped" in capsys.readouterr().out
        after = room_processes(room)
        assert not kinds(after, "ada")["runs"] and [p.pid for p in kinds(after, "ada")["kernels"]] == [
            p.pid for p in ada["kernels"]
        ]
        assert len(kinds(after, "alan")["runs"]) == 2  # nobody else's run was touched

        stop_runs(after, "alan", kernels=True)
        assert {p.pid for p in room_processes(room)} == {servers["ada"].pid, ada["kernels"][0].pid, servers["alan"].pid}
        assert main(["workshop", "stop", "eve", "--room", str(room)]) == 2
        assert "'eve' is not in this room" in capsys.readouterr().err
    finally:
        for server in servers.values():
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        for p in room_processes(room):  # the orphans, in no process group of ours
            os.kill(p.pid, signal.SIGKILL)


def test_status_and_stop_say_what_a_room_folder_is(tmp_path, capsys):
    assert main(["workshop", "status", "--room", str(tmp_path)]) == 2
    assert "is not a workshop's room folder" in capsys.readouterr().err
