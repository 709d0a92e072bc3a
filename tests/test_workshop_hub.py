"""The workshop for real: `minipipe workshop start` runs JupyterHub on loopback for two participants;
both log in through the hub's login form, start their servers and run lesson 00 at the same time.
Their ranks ran on disjoint cores, each inside their own slice; their folders are separate; and when
the hub stops, so do their servers, kernels, ranks and the proxy."""
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
import requests

from hub_client import Participant

REPO = Path(__file__).resolve().parents[1]
NAMES = ("ada", "alan")
LESSON = "lessons/00_start_here.ipynb"


def require_hub():
    """Skip without JupyterHub or its proxy; fail instead in CI, which must run this test."""
    try:
        from minipipe.workshop.hub import proxy_command
        proxy_command()
    except (ImportError, ValueError) as e:
        if os.environ.get("CI"):
            pytest.fail(f"the workshop test needs JupyterHub and configurable-http-proxy (make workshop): {e}")
        pytest.skip(f"JupyterHub or its proxy is not installed (make workshop): {e}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_of(room: Path) -> dict[int, tuple[str, str]]:
    """{pid: (participant, command line)} of every process whose HOME is a participant's folder:
    their server, its kernels, and everything those start (ranks, the fork server)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for name in NAMES:
            if f"HOME={room / 'participants' / name}".encode() in env:
                found[int(entry)] = (name, cmd)
    return found


def cores_of(pid: int) -> tuple[set[int], int] | None:
    """(the cores a process may run on, the core it last ran on), or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return os.sched_getaffinity(pid), int(fields[36])     # field 39 of stat: the CPU it last ran on
    except (OSError, IndexError):
        return None


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_two_participants_run_a_lesson_at_once_on_their_own_slices(tmp_path):
    require_hub()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("two participants need two cores")
    room, port = tmp_path / "room", free_port()
    log = open(tmp_path / "hub.log", "w")
    hub = subprocess.Popen([sys.executable, "-m", "minipipe", "workshop", "start", "--names", ",".join(NAMES),
                            "--room", str(room), "--ip", "127.0.0.1", "--port", str(port)],
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), str(Path(__file__).parent),
                                                                                       os.environ.get("PYTHONPATH")]))),
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, dict] = {name: {"allowed": set(), "ran_on": set(), "forked": set()} for name in NAMES}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/hub/api/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.5)
        else:
            pytest.fail("the hub did not answer within 120 s:\n" + (tmp_path / "hub.log").read_text()[-3000:])
        passwords = {r["name"]: r["password"] for r in csv.DictReader(open(room / "hub" / "passwords.csv"))}
        slices = {name: set(s["cores"]) for name, s in
                  json.loads((room / "hub" / "slices.json").read_text()).items()}
        assert not slices["ada"] & slices["alan"]

        intruder = Participant(base, "ada", passwords["alan"])
        with pytest.raises(RuntimeError, match="could not log in"):
            intruder.log_in()                                                  # another's password: refused
        people = [Participant(base, name, passwords[name]) for name in NAMES]
        for person in people:
            person.log_in()
            person.start_server()
        kernels = [person.kernel(LESSON) for person in people]
        cells = {name: [c.source for c in nbformat.read(room / "participants" / name / LESSON, as_version=4).cells
                        if c.cell_type == "code"] for name in NAMES}
        here = ("import os\nopen('whose.txt', 'w').write(os.environ['JUPYTERHUB_USER'])\n"
                "print(os.getcwd(), flush=True)")
        outputs, errors = {}, {}

        def lesson(name, kernel):
            try:
                outputs[name] = kernel.run_all(cells[name] + [here], timeout=300)
            except Exception as e:   # noqa: BLE001 (reported below, with the other participant's)
                errors[name] = e

        threads = [threading.Thread(target=lesson, args=(n, k)) for n, k in zip(NAMES, kernels)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):             # watch where every process of theirs runs
            for pid, (name, cmd) in processes_of(room).items():
                where = cores_of(pid)
                if where is not None:
                    seen[name]["allowed"] |= where[0]
                    seen[name]["ran_on"].add(where[1])
                    if "forkserver" in cmd:
                        seen[name]["forked"].add(pid)
            time.sleep(0.1)
        assert not errors, f"a lesson failed: {errors}"
        # the teacher's view: both servers and their kernels; each server inside its own cgroup where there are any
        status = subprocess.run([sys.executable, "-m", "minipipe", "workshop", "status", "--room", str(room)],
                                capture_output=True, text=True, timeout=60)
        rows = {line.split()[0]: line.split() for line in status.stdout.splitlines()[2:] if line.strip()}
        assert all(rows[name][1] == "pid" and int(rows[name][3]) >= 1 for name in NAMES), status
        cgroups = json.loads((room / "hub" / "limits.json").read_text())["cgroups"]
        for name in NAMES:
            server = int(rows[name][2])
            joined = Path(f"/proc/{server}/cgroup").read_text()
            assert (f"minipipe-room-" in joined and f"/{name}\n" in joined) == bool(cgroups), (name, joined, cgroups)
    finally:
        hub.send_signal(signal.SIGTERM)          # as Ctrl-C would: the hub stops the servers and the proxy
        try:
            hub.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(hub.pid, signal.SIGKILL)
            hub.wait()
        log.close()

    for name in NAMES:
        # the fork server and at least the lesson's two ranks, all inside the slice, never on another's core
        assert len(seen[name]["forked"]) >= 3, (name, seen[name])
        assert seen[name]["allowed"] <= slices[name] and seen[name]["ran_on"] <= slices[name], (name, seen[name])
        assert any(f"CPU cores: {len(slices[name])} (core" in out for out in outputs[name])   # machine(): the slice
        folder = room / "participants" / name
        assert outputs[name][-1].strip() == str(folder / "lessons")
        assert (folder / "lessons" / "whose.txt").read_text() == name
    assert not seen["ada"]["ran_on"] & seen["alan"]["ran_on"]

    time.sleep(1)
    left = processes_of(room)
    assert not left, f"still running after the hub stopped: {left}"
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base}/hub/api/", timeout=2)                           # the proxy is gone too
