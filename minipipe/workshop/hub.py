"""JupyterHub for a room: one server per participant, each on its own slice of the machine.

The hub's config file (written by `minipipe workshop start`) is two lines: it calls
`configure(c, room_dir, settings)`. What that sets:

- `RoomSpawner`: JupyterHub's LocalProcessSpawner — with the hub run as root, each participant's
  server runs as their own Unix user (accounts.py: `mp-ada` for `ada`), in their folder, with that
  folder as its HOME; otherwise as the hub's own user. Before the server starts, the course files
  the folder lacks are copied in (as the participant); then the child process, still root, takes
  the participant's cores as its affinity (which the server, its kernels and every rank they start
  inherit) and joins their cgroup, and only then becomes the participant. CUDA_VISIBLE_DEVICES
  names their GPUs. When the server stops, every process of its user is ended.
- `RoomAuthenticator`: a password per participant (or one shared by the room), checked against
  scrypt hashes in room/hub/room.json; only the room's names log in; `teacher` is the admin.

What this does not do: without root, participants are not kept apart (one system user), which suits
a room of people who trust each other, for a day. With root, files are apart (apart.py) but GPUs,
/tmp, the loopback network and the process list are shared (README, "Teaching a workshop"). The
limits keep a mistake (a runaway loop of ranks, a tensor too big) inside one participant's share.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
from pathlib import Path

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Dict, Unicode

from ..engine.cores import FOLDER_ENV
from .accounts import Account, kill_processes
from .apart import FURNISH
from .limits import Cgroups, Limits
from .owner import give_folder
from .procs import ROOM_ENV
from .room import TEACHER, Room, password_matches


class RoomAuthenticator(Authenticator):
    """Log in with the password the teacher handed out (room/hub/passwords.csv)."""

    room_dir = Unicode(config=True, help="the workshop's folder (room.py)")

    async def authenticate(self, handler, data):
        room = Room.load(self.room_dir)  # read at each log-in: a restart of the hub is not needed
        name = self.normalize_username(data.get("username", ""))
        stored = room.hashes.get(name)
        if stored is None or not password_matches(data.get("password", ""), stored):
            return None
        return {"name": name, "admin": name == TEACHER}

    def check_allowed(self, username, authentication=None):
        return username == TEACHER or username in Room.load(self.room_dir).names


class RoomSpawner(LocalProcessSpawner):
    """A participant's server in their folder, on their slice of cores and GPUs, as their own user."""

    room_dir = Unicode(config=True, help="the workshop's folder (room.py)")
    home_dir_template = Unicode(config=True, help="a participant's folder, {username} for their name")
    accounts = Dict(config=True, help="name -> Unix user (accounts.py), or {} to run every server as the hub's user")
    core_locks = Unicode("", config=True, help="the folder of core locks every participant's runs share (cores.py)")
    slices = Dict(config=True, help="name -> {'cores': [...], 'gpus': [...] or None}")
    machine_gpus = Unicode("", config=True, help="CUDA_VISIBLE_DEVICES of the hub, to name GPUs from")
    limits = Dict(config=True, help="name -> {'memory': bytes, 'tasks': n}")
    cgroups = Dict(config=True, help="{'version': 1 or 2, 'bases': {controller: folder}}, or {} for none")

    def _cgroups(self) -> Cgroups | None:
        return Cgroups.from_settings(self.cgroups)

    @property
    def home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    def _account(self) -> Account | None:
        login = self.accounts.get(self.user.name)
        if login is None:
            return None
        try:
            pw = pwd.getpwnam(login)
        except KeyError:
            raise RuntimeError(
                f"the Unix user {login} of {self.user.name} is gone (`minipipe workshop cleanup` removed "
                f"it?): start the workshop again to make it"
            ) from None
        return Account(self.user.name, login, pw.pw_uid, pw.pw_gid, Path(self.home_dir))

    def _furnish(self, account: Account | None) -> None:
        """The course files the folder lacks (a lesson deleted by mistake comes back), as its owner."""
        if account is None:
            Room.load(self.room_dir).furnish(self.user.name)
            return
        left = give_folder(account.home, account.uid, account.gid)  # files the teacher copied in, as root
        if left:
            self.log.warning("%s's folder: left as they were: %s", self.user.name, "; ".join(left[:5]))
        done = account.run([sys.executable, "-c", FURNISH, str(account.home)], timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"could not copy the course into {account.home} as {account.login}: {done.stderr.strip()[-600:]}"
            )

    def _slice(self) -> dict:
        mine = self.slices.get(self.user.name)
        if mine is None:
            if self.user.name == TEACHER:
                raise RuntimeError(
                    "the teacher's log-in has no server of its own (it would take a participant's "
                    "cores): use the admin page, /hub/admin, to see and restart participants' servers"
                )
            raise RuntimeError(f"{self.user.name} has no slice of this machine; restart the workshop with this name")
        return mine

    async def start(self):
        self._slice()
        await asyncio.to_thread(self._furnish, self._account())
        groups, lim = self._cgroups(), self.limits.get(self.user.name)
        if groups is not None and lim is not None:
            groups.make(self.user.name, Limits(lim["memory"], lim["tasks"], tuple(self._slice()["cores"])))
        return await super().start()

    async def stop(self, now=False):
        await super().stop(now)
        groups = self._cgroups()
        if groups is not None and self.user.name in self.limits:
            left = groups.kill(self.user.name)  # a rank its kernel left behind: no orphans
            if left:
                self.log.warning("killed %d process(es) %s's server left behind", left, self.user.name)
            for _ in range(40):  # the killed take a moment to leave the cgroup
                if not groups.pids(self.user.name):
                    break
                await asyncio.sleep(0.05)
            groups.remove(self.user.name)  # made again, with the limits of the day, at the next start
        account = self._account()
        if account is not None:  # without cgroups, this is what ends a rank left behind
            left = await asyncio.to_thread(kill_processes, {account.uid})
            if left:
                self.log.warning("killed %d process(es) of %s left behind", left, account.login)

    def make_preexec_fn(self, name):
        cores, home, account = set(self._slice()["cores"]), self.home_dir, self._account()
        groups = self._cgroups() if name in self.limits else None

        def as_root():  # in the child, before it becomes the participant, then the server
            if account is None:
                os.makedirs(home, 0o755, exist_ok=True)
            os.chdir(home)
            os.sched_setaffinity(0, cores)
            if groups is not None:
                groups.join(name)  # fails the start rather than run a server without its limits

        return as_root if account is None else account.preexec(as_root)

    def user_env(self, env):
        account = self._account()
        if account is not None:
            return account.env(env)
        return {**env, "USER": self.user.name, "HOME": self.home_dir, "SHELL": "/bin/bash"}

    def move_certs(self, paths):
        return paths  # no internal TLS between the hub and the servers: nothing to move

    def get_env(self):
        env = super().get_env()
        env.update(self.slice_env(env.get("PATH", os.defpath)))
        return env

    def slice_env(self, path: str) -> dict:
        """What the participant's server gets besides JupyterHub's own variables."""
        mine = self._slice()
        env = {
            "OMP_NUM_THREADS": str(len(mine["cores"])),  # torch's threads: as many as the cores given
            ROOM_ENV: str(Path(self.room_dir).resolve()),  # whose process is whose (procs.py)
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), path]),
        }  # `minipipe check` in a terminal
        if self.core_locks:
            env[FOLDER_ENV] = self.core_locks  # the one the hub made (root's, mode 1777)
        if mine["gpus"] is not None:
            names = self.machine_gpus.split(",") if self.machine_gpus else None
            env["CUDA_VISIBLE_DEVICES"] = ",".join(names[g] if names else str(g) for g in mine["gpus"])
        return env


def landing(handler) -> str:
    """Where a log-in lands: the teacher on the admin page (their log-in has no server to start),
    everyone else on their own server ("" is JupyterHub's default)."""
    user = handler.current_user
    return f"{handler.hub.base_url}admin" if user is not None and user.name == TEACHER else ""


def proxy_command() -> str:
    """configurable-http-proxy: the one `make workshop` installs into the venv, else one on PATH."""
    local = Path(sys.prefix) / "node_modules" / ".bin" / "configurable-http-proxy"
    found = str(local) if local.exists() else shutil.which("configurable-http-proxy")
    if found is None:
        raise ValueError(
            "JupyterHub's proxy, configurable-http-proxy, is not installed: `make workshop` installs it "
            f"(npm install --prefix {sys.prefix} configurable-http-proxy; node and npm are needed)"
        )
    return found


def configure(c, room_dir: str, settings: dict) -> None:
    """Fill JupyterHub's config `c` for the room at `room_dir` (settings: written by `workshop start`)."""
    hub = Path(room_dir) / "hub"
    c.JupyterHub.bind_url = settings["bind_url"]
    c.JupyterHub.hub_port = settings["hub_port"]
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"
    c.ConfigurableHTTPProxy.command = [proxy_command()]
    c.JupyterHub.db_url = f"sqlite:///{hub / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(hub / "jupyterhub_cookie_secret")
    c.JupyterHub.pid_file = str(hub / "jupyterhub.pid")
    if settings.get("ssl_cert"):
        c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = settings["ssl_cert"], settings["ssl_key"]
    c.JupyterHub.cleanup_servers = True  # stopping the hub stops every participant's server
    c.JupyterHub.cleanup_proxy = True

    c.JupyterHub.authenticator_class = RoomAuthenticator
    c.RoomAuthenticator.room_dir = str(room_dir)
    c.Authenticator.admin_users = {TEACHER}
    c.Authenticator.any_allow_config = True  # RoomAuthenticator.check_allowed lets in the room's names only

    c.JupyterHub.spawner_class = RoomSpawner
    c.RoomSpawner.room_dir = str(room_dir)
    c.RoomSpawner.slices = settings["slices"]
    c.RoomSpawner.machine_gpus = settings.get("machine_gpus", "")
    c.RoomSpawner.limits = settings.get("limits", {})
    c.RoomSpawner.cgroups = settings.get("cgroups") or {}
    c.RoomSpawner.accounts = settings.get("accounts") or {}
    c.RoomSpawner.core_locks = settings.get("core_locks", "")
    c.RoomSpawner.home_dir_template = str(Path(room_dir) / "participants" / "{username}")
    c.Spawner.cmd = [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
    c.Spawner.default_url = "/lab/tree/lessons/00_start_here.ipynb"
    c.JupyterHub.default_url = landing
    c.Spawner.args = ["--allow-root"] if os.geteuid() == 0 and not settings.get("accounts") else []
    c.Spawner.start_timeout = 120  # a busy 2-core machine starts JupyterLab in tens of seconds
    c.Spawner.http_timeout = 120
