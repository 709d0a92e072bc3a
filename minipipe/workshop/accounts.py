"""A Unix user for each participant, where the hub runs as root, so the kernel keeps them apart.

    accounts = make_accounts("room", ["ada", "alan"])     # {"ada": Account("ada", "mp-ada", 1001, ...)}
    account = participant_account("room", "ada")          # the same, read back (None: not separated)
    Popen(cmd, preexec_fn=account.preexec(first))         # run `first` as root, then become mp-ada
    grade_notebook(nb, become=as_participant("room", "ada", first))  # a gradebook's sandbox, as mp-ada
    remove_accounts("room")                               # `minipipe workshop cleanup`: processes, users

A participant `ada` logs in to the hub as `ada` and her server, kernels and ranks run as the system
user `mp-ada`, made for the room by `minipipe workshop start` (useradd: no home made, no shell to
log in with, the room's id in its comment so that only this room's users are ever reused or
removed). Making them again is a no-op; a user of that name that this room did not make is refused,
unless minipipe made it for a room whose folder is gone (deleted without `workshop cleanup`).
Their folders and modes are apart.py's; what runs as whom is hub.py's.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .limits import room_id
from .owner import give_folder

PREFIX = "mp-"  # mp-ada: plainly a workshop's user in `ps` and `ls -l`
MARK = "minipipe workshop"  # the comment (GECOS) of every user made for a room: "minipipe workshop <room id>"
LONGEST = 32  # useradd's longest user name
FILE = "accounts.json"  # room/hub/accounts.json: {participant: user}


@dataclass(frozen=True)
class Account:
    name: str  # the participant, as they log in to the hub
    login: str  # their Unix user
    uid: int
    gid: int
    home: Path  # their folder in the room

    def become(self) -> None:
        """Turn this (child) process into the participant: their group alone, their uid, and a umask
        that keeps what they make to themselves. Irreversible, so only ever in a child."""
        os.setgid(self.gid)
        os.setgroups([])
        os.setuid(self.uid)
        os.umask(0o077)

    def preexec(self, first=None):
        """A preexec_fn for Popen: `first()` while still root (join a cgroup, set the affinity), then
        become the participant. Popen has already moved into its `cwd` by then."""

        def run():
            if first is not None:
                first()
            self.become()

        return run

    def env(self, env: dict) -> dict:
        """`env` with the participant's user, home and a shell for JupyterLab's terminals."""
        return {**env, "USER": self.login, "LOGNAME": self.login, "HOME": str(self.home), "SHELL": "/bin/bash"}

    def call(self, fn, *args) -> None:
        """`fn(*args)` as the participant, in their folder, in a forked child: no program to start, so
        for a single-threaded caller only (`workshop start`; the hub, with its threads, uses `run`).
        An exception in the child is raised here as a ValueError with its words."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read)
                os.chdir(self.home)
                self.become()
                fn(*args)
                code = 0
            except BaseException as e:  # noqa: BLE001 (told to the parent, which raises it)
                os.write(write, f"{type(e).__name__}: {e}".encode()[:4000])
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            said = f.read().decode(errors="replace")
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
            raise ValueError(f"as {self.login}: {said or 'the child process failed'}")

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run a program as the participant, in their folder (what the hub copies into it, a probe)."""
        return subprocess.run(
            argv,
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            umask=0o077,
            cwd=self.home,
            env=self.env(kw.pop("env", os.environ)),
            capture_output=True,
            text=True,
            **kw,
        )


def login_of(name: str) -> str:
    login = PREFIX + name
    if len(login) > LONGEST:
        raise ValueError(
            f"participant name {name!r} is too long to be a Unix user as {login!r} (at most "
            f"{LONGEST - len(PREFIX)} characters); choose a shorter one"
        )
    return login


def mark_of(room_root: str | Path) -> str:
    return f"{MARK} {room_id(room_root)}"


def why_not_separated() -> str | None:
    """Why participants cannot each run as their own user here, or None when they can."""
    if os.geteuid() != 0:
        who = pwd.getpwuid(os.geteuid()).pw_name
        return f"the hub runs as {who}, not root, and only root can run a server as another user"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "useradd and userdel are not installed (Debian, Ubuntu: apt-get install passwd)"
    return None


def make_accounts(room_root: str | Path, names: list[str]) -> dict[str, Account]:
    """A Unix user for each participant of the room (made if missing), written to room/hub/accounts.json."""
    room_root = Path(room_root).resolve()
    mark = mark_of(room_root)
    for name in names:
        login = login_of(name)
        try:
            found = pwd.getpwnam(login)
        except KeyError:
            _run_or_refuse(
                [
                    "useradd",
                    "--no-create-home",
                    "--user-group",
                    "--home-dir",
                    str(room_root / "participants" / name),
                    "--shell",
                    "/usr/sbin/nologin",
                    "--comment",
                    mark,
                    login,
                ],
                f"make the Unix user {login} for {name}",
            )
            continue
        if found.pw_gecos == mark:
            continue
        home = str(room_root / "participants" / name)
        if found.pw_gecos.startswith(MARK) and not Path(found.pw_dir).parent.parent.exists():
            # made for a room whose folder is gone (deleted without `workshop cleanup`): nobody's now
            _run_or_refuse(["usermod", "--comment", mark, "--home", home, login], f"take over the Unix user {login}")
            continue
        other_room = f"{found.pw_gecos[len(MARK) + 1 :]}, {Path(found.pw_dir).parent.parent}"
        whose = (
            f"was made for another workshop room ({other_room}): run `minipipe workshop cleanup --room` there"
            if found.pw_gecos.startswith(MARK)
            else f"is not one this room made (its comment: {found.pw_gecos!r}): it is never taken over"
        )
        raise ValueError(f"the Unix user {login}, for participant {name}, {whose}; or choose other names")
    (room_root / "hub" / FILE).write_text(json.dumps({n: login_of(n) for n in names}, indent=1))
    return room_accounts(room_root)


def _run_or_refuse(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ValueError(f"could not {what}: {done.stderr.strip()}")


def room_accounts(room_root: str | Path) -> dict[str, Account]:
    """{participant: Account} of a room whose participants are separated; {} for any other room."""
    room_root = Path(room_root).resolve()
    try:
        logins = json.loads((room_root / "hub" / FILE).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, login in logins.items():
        try:
            pw = pwd.getpwnam(login)
        except KeyError:
            continue  # removed by `workshop cleanup`
        if pw.pw_gecos == mark_of(room_root):
            out[name] = Account(name, login, pw.pw_uid, pw.pw_gid, room_root / "participants" / name)
    return out


def participant_account(room_root: str | Path, name: str) -> Account | None:
    """The Unix user a participant's notebooks should run as, or None: a room whose participants are
    not separated, or a caller that is not root (and so could not become them anyway)."""
    if os.geteuid() != 0:
        return None
    return room_accounts(room_root).get(name)


class AsParticipant:
    """A preexec_fn that runs `first` (root's part: a cgroup, the cores), then becomes the participant;
    and, for a Jupyter kernel, what its KernelManager must be given for that kernel to start as them
    (course/exercises/notebook.py asks for `kernel_kwargs`)."""

    def __init__(self, account: Account, first=None):
        self.account, self.first = account, first
        self._run = account.preexec(first)

    def __call__(self) -> None:
        self._run()

    def kernel_kwargs(self, km) -> dict:
        """start_kernel's keyword arguments for `km`. The kernel reads its connection file once it has
        become the participant, so the file goes in a folder they may pass, and is given to them in
        the child, still root: jupyter_client has written it by then (and may have rewritten it since
        this call, so giving it here would not do)."""
        km.connection_file = path = str(_connection_folder() / f"kernel-{uuid.uuid4()}.json")
        first, account = self.first, self.account

        def as_root():
            if first is not None:
                first()
            os.chown(path, account.uid, account.gid)

        return {"preexec_fn": account.preexec(as_root), "env": account.env(os.environ)}


@functools.cache
def _connection_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="minipipe-kernels-"))
    folder.chmod(0o711)  # passable, not listable: each file is its kernel's participant's alone
    atexit.register(shutil.rmtree, folder, True)
    return folder


def as_participant(folder: str | Path, name: str, first=None):
    """For the gradebook: a preexec_fn that runs `first`, then becomes participant `name` of the room
    at `folder` (the room, or its participants/ folder); `first` unchanged where the room's
    participants are not separated or this process is not root."""
    folder = Path(folder)
    account = participant_account(folder.parent if folder.name == "participants" else folder, name)
    return first if account is None else AsParticipant(account, first)


def processes_of(uids: set[int], proc: Path = Path("/proc")) -> set[int]:
    """Every process whose real, effective or saved uid is one of `uids`."""
    found = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if {int(u) for u in line.split()[1:4]} & uids:
                    found.add(int(entry.name))
                break
    return found


def kill_processes(uids: set[int], patience: float = 5.0) -> int:
    """SIGKILL every process of these users, again until none is left (a loop that forks keeps
    making more for a moment): how many were killed. Only ever for a room's own users."""
    killed, deadline = set(), time.monotonic() + patience
    while time.monotonic() < deadline:
        alive = {pid for pid in processes_of(uids) if not _zombie(pid)}
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return len(killed)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def remove_accounts(room_root: str | Path) -> list[str]:
    """Every Unix user made for this room (found by its comment): their processes killed, the user
    and its group deleted. Their folders stay, with all in them, given back to root (owner.py).
    Returns the users removed."""
    room_root = Path(room_root).resolve()
    mine = [pw for pw in pwd.getpwall() if pw.pw_gecos == mark_of(room_root)]
    kill_processes({pw.pw_uid for pw in mine})
    for pw in mine:
        done = subprocess.run(["userdel", pw.pw_name], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise ValueError(f"could not remove the Unix user {pw.pw_name}: {done.stderr.strip()}")
        if Path(pw.pw_dir).is_dir() and Path(pw.pw_dir).parent == room_root / "participants":
            give_folder(Path(pw.pw_dir), 0, 0)
    (room_root / "hub" / FILE).unlink(missing_ok=True)
    return [pw.pw_name for pw in mine]
