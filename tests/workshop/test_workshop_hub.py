"""The workshop for real: `minipipe workshop start` runs JupyterHub on loopback for two participants;
both log in through the hub's login form, start their servers and run lesson 00 at the same time.
Their ranks ran on disjoint cores, each inside their own slice; their folders are separate; and when
the hub stops, so do their servers, kernels, ranks and the proxy. As root, each ran as a Unix user of
their own: their kernel could open their own notebook and the lessons, not the solutions, another's
notebook or the passwords; and `minipipe workshop cleanup` removes those users afterwards.

The hub runs once for the module (a minute or two); the tests below read what that day left."""

import csv
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
import requests

from minipipe.workshop.accounts import processes_of as processes_of_users
from minipipe.workshop.accounts import remove_accounts, room_accounts, why_not_separated
from minipipe.workshop.procs import alive
from tests.support.hub_client import Participant
from tests.support.users import open_to_others, users_or_skip

REPO = Path(__file__).resolve().parents[2]
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
        return os.sched_getaffinity(pid), int(fields[36])  # field 39 of stat: the CPU it last ran on
    except (OSError, IndexError):
        return None


# what a participant's kernel tries to open, after the lesson: {label: [path, "file" or "folder"]}
TRIES = """
import json, os, pwd
def tries(path, kind):
    try:
        os.listdir(path) if kind == "folder" else open(path, "rb").close()
        return "read"
    except PermissionError:
        return "refused"
    except OSError as e:
        return type(e).__name__
print(json.dumps({"user": pwd.getpwuid(os.getuid()).pw_name,
                  **{label: tries(*where) for label, where in json.loads(%r).items()}}))
"""


def what_to_try(room: Path, name: str, other: str) -> dict[str, list[str]]:
    mine, theirs = room / "participants" / name, room / "participants" / other
    source = sorted((REPO / "exercises" / "source").glob("*.py"))[0]
    tries = {
        "a solution": [REPO / "exercises" / "solutions" / "03_one_f_one_b.ipynb", "file"],
        "an exercise's source": [source, "file"],
        "another's notebook": [theirs / LESSON, "file"],
        "another's folder": [theirs, "folder"],
        "the passwords": [room / "hub" / "passwords.csv", "file"],
        "their own notebook": [mine / LESSON, "file"],
        "the lesson in the checkout": [REPO / LESSON, "file"],
        "the package": [REPO / "minipipe" / "__init__.py", "file"],
    }
    if (REPO / ".git").is_dir():
        tries["git's history"] = [REPO / ".git" / "HEAD", "file"]
    return {label: [str(path), kind] for label, (path, kind) in tries.items()}


@dataclass
class Day:
    room: Path
    log: str = ""  # the hub's output: the start report first
    slices: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    status: str = ""
    rows: dict = field(default_factory=dict)
    cgroups: dict | None = None
    servers: dict = field(default_factory=dict)  # name -> /proc/<server>/cgroup
    accounts: dict = field(default_factory=dict)  # name -> (login, uid), while the hub ran
    left: dict = field(default_factory=dict)  # HOME-found processes after the hub stopped
    left_of_users: set = field(default_factory=set)  # processes of the participants' users after it stopped
    hub_answers: bool = False
    cleanup: str = ""  # what `minipipe workshop cleanup` said
    users_after_cleanup: list = field(default_factory=list)
    owners_after_cleanup: dict = field(default_factory=dict)
    whose_after_cleanup: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def day():
    require_hub()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("two participants need two cores")
    # the room where the participants' users may reach it: not under pytest's own (closed) folder
    base = Path(tempfile.mkdtemp(prefix="minipipe-hub-"))
    base.chmod(0o755)
    separated = why_not_separated() is None
    try:
        with open_to_others([Path(sys.executable), REPO / LESSON] if separated else []):
            yield run_the_day(base / "room", separated)
    finally:
        if separated:
            remove_accounts(base / "room")  # what `workshop cleanup` did not get to, when the day failed early
        shutil.rmtree(base, ignore_errors=True)


def run_the_day(room: Path, separated: bool) -> Day:
    port, d = free_port(), Day(room)
    log_path = room.parent / "hub.log"
    with open(log_path, "w") as log:  # the hub writes to its own copy of the descriptor
        hub = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "minipipe",
                "workshop",
                "start",
                "--names",
                ",".join(NAMES),
                "--room",
                str(room),
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    d.seen = {name: {"allowed": set(), "ran_on": set(), "forked": set()} for name in NAMES}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and hub.poll() is None:
            try:
                if requests.get(f"{base}/hub/api/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.5)
        else:
            said = "stopped" if hub.poll() is not None else "did not answer within 120 s"
            pytest.fail(f"the hub {said}:\n" + log_path.read_text()[-3000:])
        d.accounts = {n: (a.login, a.uid) for n, a in room_accounts(room).items()}
        passwords = {r["name"]: r["password"] for r in csv.DictReader((room / "hub" / "passwords.csv").open())}
        d.slices = {name: set(s["cores"]) for name, s in json.loads((room / "hub" / "slices.json").read_text()).items()}
        assert not d.slices["ada"] & d.slices["alan"]

        intruder = Participant(base, "ada", passwords["alan"])
        with pytest.raises(RuntimeError, match="could not log in"):
            intruder.log_in()  # another's password: refused
        people = [Participant(base, name, passwords[name]) for name in NAMES]
        for person in people:
            person.log_in()
            person.start_server()
        kernels = [person.kernel(LESSON) for person in people]
        cells = {
            name: [
                c.source
                for c in nbformat.read(room / "participants" / name / LESSON, as_version=4).cells
                if c.cell_type == "code"
            ]
            for name in NAMES
        }
        here = "import os\nopen('whose.txt', 'w').write(os.environ['JUPYTERHUB_USER'])\nprint(os.getcwd(), flush=True)"

        def lesson(name, kernel):
            other = next(n for n in NAMES if n != name)
            try:
                d.outputs[name] = kernel.run_all(
                    cells[name] + [here, TRIES % json.dumps(what_to_try(room, name, other))], timeout=300
                )
            except Exception as e:  # noqa: BLE001 (reported below, with the other participant's)
                d.errors[name] = e

        threads = [threading.Thread(target=lesson, args=(n, k)) for n, k in zip(NAMES, kernels)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):  # watch where every process of theirs runs
            for pid, (name, cmd) in processes_of(room).items():
                where = cores_of(pid)
                if where is not None:
                    d.seen[name]["allowed"] |= where[0]
                    d.seen[name]["ran_on"].add(where[1])
                    if "forkserver" in cmd:
                        d.seen[name]["forked"].add(pid)
            time.sleep(0.1)
        # the teacher's view: both servers and their kernels; each server inside its own cgroup where there are any
        d.status = subprocess.run(
            [sys.executable, "-m", "minipipe", "workshop", "status", "--room", str(room)],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        d.rows = {line.split()[0]: line.split() for line in d.status.splitlines()[2 : 2 + len(NAMES)] if line.strip()}
        d.cgroups = json.loads((room / "hub" / "limits.json").read_text())["cgroups"]
        for name in NAMES:
            if d.rows.get(name, [""] * 3)[1] == "pid":
                d.servers[name] = Path(f"/proc/{int(d.rows[name][2])}/cgroup").read_text()
    finally:
        hub.send_signal(signal.SIGTERM)  # as Ctrl-C would: the hub stops the servers and the proxy
        try:
            hub.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(hub.pid, signal.SIGKILL)
            hub.wait()
        d.log = log_path.read_text()

    time.sleep(1)
    d.left = processes_of(room)
    d.left_of_users = {p for p in processes_of_users({uid for _, uid in d.accounts.values()}) if alive(p)}
    try:
        requests.get(f"{base}/hub/api/", timeout=2)
    except requests.ConnectionError:
        d.hub_answers = False
    else:
        d.hub_answers = True
    if separated:
        d.cleanup = subprocess.run(
            [sys.executable, "-m", "minipipe", "workshop", "cleanup", "--room", str(room)],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        d.users_after_cleanup = [
            login for login, _ in d.accounts.values() if login in {p.pw_name for p in pwd.getpwall()}
        ]
        for name in NAMES:
            folder = room / "participants" / name
            d.owners_after_cleanup[name] = {
                (p.stat().st_uid, p.stat().st_mode & 0o077) for p in [folder, *folder.rglob("*")]
            }
            d.whose_after_cleanup[name] = (folder / "lessons" / "whose.txt").read_text()
    return d


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_two_participants_run_a_lesson_at_once_on_their_own_slices(day):
    assert not day.errors, f"a lesson failed: {day.errors}\n{day.log[-3000:]}"
    assert all(day.rows[name][1] == "pid" and int(day.rows[name][3]) >= 1 for name in NAMES), day.status
    for name in NAMES:
        joined = day.servers[name]
        assert ("minipipe-room-" in joined and f"/{name}\n" in joined) == bool(day.cgroups), (name, joined, day.cgroups)
        # the fork server and at least the lesson's two ranks, all inside the slice, never on another's core
        assert len(day.seen[name]["forked"]) >= 3, (name, day.seen[name])
        assert day.seen[name]["allowed"] <= day.slices[name] and day.seen[name]["ran_on"] <= day.slices[name], (
            name,
            day.seen[name],
        )
        assert any(
            f"CPU cores: {len(day.slices[name])} (core" in out for out in day.outputs[name]
        )  # machine(): the slice
        folder = day.room / "participants" / name
        assert day.outputs[name][-2].strip() == str(folder / "lessons")
        assert (folder / "lessons" / "whose.txt").read_text() == name
    assert not day.seen["ada"]["ran_on"] & day.seen["alan"]["ran_on"]
    assert not day.left, f"still running after the hub stopped: {day.left}"
    assert not day.hub_answers  # the proxy is gone too


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_as_root_each_participant_is_a_user_who_reads_their_own_work_and_not_the_answers(day):
    if why_not_separated() is not None:
        assert "participants NOT separated" in day.log  # and the teacher is told so at start
    users_or_skip()
    assert "participants kept apart" in day.log, day.log[:3000]
    assert not day.errors, f"a lesson failed: {day.errors}"
    for name in NAMES:
        tried = json.loads(day.outputs[name][-1])
        assert tried.pop("user") == f"mp-{name}" == day.accounts[name][0]
        mine = {"their own notebook", "the lesson in the checkout", "the package"}
        assert {label: seen for label, seen in tried.items() if label in mine} == dict.fromkeys(mine, "read")
        assert {label: seen for label, seen in tried.items() if label not in mine} == dict.fromkeys(
            set(tried) - mine, "refused"
        ), tried
    assert all(f"{name} as mp-{name} (uid {day.accounts[name][1]})" in day.status for name in NAMES), day.status
    assert not day.left_of_users, f"processes of the participants' users after the hub stopped: {day.left_of_users}"
    # after the workshop: their users gone, their work kept, root's alone
    assert "removed 2 Unix users" in day.cleanup and not day.users_after_cleanup, day.cleanup
    for name in NAMES:
        assert day.owners_after_cleanup[name] == {(0, 0)}, day.owners_after_cleanup[name]
        assert day.whose_after_cleanup[name] == name
