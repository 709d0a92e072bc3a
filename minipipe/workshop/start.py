"""`minipipe workshop start`: the room made ready, the teacher's table printed, then JupyterHub.

    minipipe workshop start --participants 20          # p01 ... p20, a password each
    minipipe workshop start --names ada,alan --password "one for the room"

Everything is checked before the hub starts (names, cores enough for everyone, JupyterHub and its
proxy installed, TLS files readable), with a ValueError that says what to change. The hub then
replaces this process: Ctrl-C (or SIGTERM) stops it, and with it every participant's server and
the proxy.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from ..course import jupyter_setup
from ..engine.cores import allowed_cores, lock_folder
from .accounts import why_not_separated
from .apart import keep_apart
from .limits import GIB, Cgroups, describe_enforcement, machine_memory, memory_warning, room_id, room_limits
from .room import TEACHER, Room
from .slices import check_names, make_slices, table, warnings_for

CONFIG = """# written by `minipipe workshop start`; start the workshop again rather than editing this
from minipipe.workshop.hub import configure

configure(c, {room!r}, {settings!r})  # noqa: F821 (JupyterHub's config object)
"""


@dataclass
class Prepared:
    room: Room
    config: Path  # JupyterHub's config file
    url: str  # what the participants open
    report: str  # the teacher's table and what to know
    users_later: bool = False  # --dry-run where the participants would get users: only a real start makes them


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MIN_MEMORY_GIB = 0.5  # a participant's JupyterLab server and one kernel with torch imported take ~0.4 GiB


def check_listening(ip, port) -> None:
    """--ip is an address (IPv4 or IPv6, 0.0.0.0 for all) and --port one a server can listen on."""
    try:
        if ip != "":  # "": every address, as 0.0.0.0
            ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(
            f"--ip {str(ip)[:80]!r} is not an IP address; give this machine's address the room can reach, "
            f"e.g. 0.0.0.0 (all of them, the default), 127.0.0.1 or an IPv6 address such as ::"
        ) from None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"--port must be a whole number from 1 to 65535, got {port!r}; the default is 8000")


def check_memory(memory) -> None:
    if memory is None:
        return
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not MIN_MEMORY_GIB <= memory < math.inf:
        raise ValueError(
            f"--memory is GiB for each participant, at least {MIN_MEMORY_GIB:g} (their JupyterLab and a "
            f"kernel with torch take ~0.4), got {memory!r}; or leave it out for an equal share of the "
            f"machine's"
        )


def participant_names(participants: int | None, names: str | None) -> list[str]:
    if names:
        return check_names([n.strip() for n in names.split(",") if n.strip()])
    if participants is None or participants < 1:
        raise ValueError("say who comes: --participants N (names p01, p02, ...) or --names ada,alan,...")
    return [f"p{i:0{max(2, len(str(participants)))}d}" for i in range(1, participants + 1)]


def prepare_room(
    names: list[str],
    room_dir: str = "room",
    ip: str = "0.0.0.0",
    port: int = 8000,
    password: str | None = None,
    ssl_cert: str | None = None,
    ssl_key: str | None = None,
    gpus: int | None = None,
    memory: float | None = None,
    tasks: int | None = None,
    cgroups: bool = True,
    same_user: bool = False,
    make_users: bool = True,
) -> Prepared:
    """Make the room ready and write the hub's config; start nothing. As root each participant gets
    a Unix user of their own (apart.py) unless `same_user`; `make_users` False (--dry-run) only says so."""
    check_listening(ip, port)
    check_memory(memory)
    try:
        from .hub import proxy_command
    except ImportError:
        raise ValueError(
            "JupyterHub is not installed: `make workshop` installs it (pip install -e '.[workshop]')"
        ) from None
    proxy_command()
    if bool(ssl_cert) != bool(ssl_key):
        raise ValueError("https needs both --ssl-cert and --ssl-key")
    for f in filter(None, (ssl_cert, ssl_key)):
        if not os.access(f, os.R_OK):
            raise ValueError(f"cannot read {f}; give the TLS certificate and key files the hub should use")
    if gpus is None:
        from ..engine.placement import visible_gpus

        gpus = visible_gpus()
    cores = allowed_cores()
    slices = make_slices(names, cores, gpus)
    limits = room_limits(
        slices,
        machine_memory(),
        None if memory is None else int(memory * GIB),
        **({} if tasks is None else {"tasks": tasks}),
    )
    room = Room.open(room_dir, names, shared_password=password)
    groups = Cgroups.find(room_id(room.root)) if cgroups else None
    room.hub_dir.chmod(0o700)  # passwords, their hashes, the hub's database: the teacher's
    accounts, apart = keep_apart(room, names, same_user, make_users)
    locks, locks_note = lock_folder()  # made now, as the hub's user: participants only ever use it
    settings = {
        "bind_url": f"{'https' if ssl_cert else 'http'}://{f'[{ip}]' if ':' in ip else ip}:{port}",
        "hub_port": free_port(),
        "proxy_api_port": free_port(),
        "slices": {s.name: {"cores": list(s.cores), "gpus": list(s.gpus) if gpus else None} for s in slices},
        "machine_gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "limits": {name: {"memory": lim.memory, "tasks": lim.tasks} for name, lim in limits.items()},
        "cgroups": groups and groups.settings(),
        "accounts": accounts,
        "core_locks": str(locks),
        "ssl_cert": ssl_cert and str(Path(ssl_cert).resolve()),
        "ssl_key": ssl_key and str(Path(ssl_key).resolve()),
    }
    config = room.hub_dir / "jupyterhub_config.py"
    config.write_text(CONFIG.format(room=str(room.root), settings=settings))
    (room.hub_dir / "slices.json").write_text(json.dumps(settings["slices"], indent=1))
    (room.hub_dir / "limits.json").write_text(
        json.dumps({"limits": settings["limits"], "cgroups": settings["cgroups"]}, indent=1)
    )
    host = socket.getfqdn() if ip in ("0.0.0.0", "", "::") else f"[{ip}]" if ":" in ip else ip
    url = f"{settings['bind_url'].split('://')[0]}://{host}:{port}/"
    lines = [
        f"the workshop: {len(names)} participants, {len(cores)} cores, {gpus} GPU{'s' if gpus != 1 else ''}",
        table(slices, cores),
        "",
    ]
    first = next(iter(limits.values()))
    lines += [
        f"limits per participant (their server, kernels and ranks together): {first.describe()}, their cores",
        f"  {describe_enforcement(groups)}",
    ]
    lines += apart + ([f"note: {locks_note}"] if locks_note else [])
    lines += [f"note: {w}" for w in warnings_for(slices) + [memory_warning(limits)] if w]
    lacking = jupyter_setup.missing()  # the participants' servers run this environment's JupyterLab
    if lacking:
        lines.append(f"note: the course's JupyterLab is not set up here ({'; '.join(lacking)}): run `make setup`")
    lines += [
        f"participants open {url} and log in with their name and password;",
        f"the passwords to hand out are in {room.hub_dir / 'passwords.csv'} (readable by you alone; "
        f"`column -s, -t {room.hub_dir / 'passwords.csv'}` prints them as a table);",
        f"'{TEACHER}' is your log-in: the admin page ({url}hub/admin) shows, stops and starts every server;",
        f"each participant's folder (the lessons, the exercises, their work): {room.root / 'participants'}/NAME",
        f"who runs what: `minipipe workshop status --room {room.root}`; to end one participant's runs: "
        f"`minipipe workshop stop NAME --room {room.root}`",
    ]
    if not ssl_cert and ip not in ("127.0.0.1", "localhost"):
        lines.append(
            "note: plain http: passwords cross the room's network unencrypted; for https pass "
            "--ssl-cert and --ssl-key, or have participants use an ssh tunnel"
        )
    return Prepared(
        room,
        config,
        url,
        "\n".join(lines),
        users_later=not make_users and not same_user and why_not_separated() is None,
    )


def start(args) -> int:
    names = participant_names(args.participants, args.names)
    prepared = prepare_room(
        names,
        args.room,
        args.ip,
        args.port,
        args.password,
        args.ssl_cert,
        args.ssl_key,
        memory=args.memory,
        tasks=args.max_tasks,
        cgroups=not args.no_limits,
        same_user=args.same_user,
        make_users=not args.dry_run,
    )
    print(prepared.report, flush=True)
    if not args.dry_run:
        print("the hub's log follows; Ctrl-C stops the hub and every participant's server\n", flush=True)
    if args.dry_run:
        how = (
            "the same command without --dry-run (which makes the participants' users)"
            if prepared.users_later
            else f"{sys.executable} -m jupyterhub -f {prepared.config}"
        )
        print(f"(--dry-run: not starting the hub; to start it: {how})")
        return 0
    os.chdir(prepared.room.hub_dir)  # the hub writes its proxy's pid file where it runs
    os.execv(sys.executable, [sys.executable, "-m", "jupyterhub", "-f", str(prepared.config)])
    return 1  # not reached
