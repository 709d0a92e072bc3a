"""Who in the room runs what: `minipipe workshop status` and `minipipe workshop stop NAME`.

    procs = room_processes("room")                  # every process of the room's servers, read from /proc
    print(status_table(procs, slices, limits))      # per participant: server, kernels, runs, memory, cores
    stop_runs(procs, "ada")                         # ada's runs end; her server and kernels stay

A participant's processes are found by what their server gave them: JUPYTERHUB_USER (their name)
and MINIPIPE_ROOM (the room's folder) in the environment, which the server's kernels and every rank
they start inherit — also a rank whose kernel died and left it behind. Three kinds:

- the server (jupyterhub-singleuser), which the admin page stops and starts;
- the server's children: kernels and terminals, where the participant works;
- runs: everything below those (ranks, fork servers, a script started in a terminal) and anything
  of theirs whose parent is gone. Stopping a participant's runs ends these only: SIGTERM, then
  SIGKILL after a grace; the cell that started them sees its ranks die and says so.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..engine.cores import describe_cores

ROOM_ENV = "MINIPIPE_ROOM"
SERVER = "jupyterhub-singleuser"
GIB = 2**30


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    user: str  # the participant (JUPYTERHUB_USER)
    rss: int  # bytes resident
    threads: int
    core: int  # the core it last ran on
    cores: frozenset[int]  # its affinity
    cmd: str

    @property
    def is_server(self) -> bool:
        return SERVER in self.cmd


def read_proc(pid: int, proc: Path = Path("/proc")) -> tuple[dict[str, str], Proc | None]:
    """(its environment, the Proc without a user) or ({}, None) if it is gone or not ours to read."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
        stat = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        cmd = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        cores = frozenset(os.sched_getaffinity(pid))
    except (OSError, IndexError):
        return {}, None
    env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
    # stat after the name: state ppid ... num_threads (20th field) ... rss in pages (24th) ... processor (39th)
    page = os.sysconf("SC_PAGE_SIZE")
    return env, Proc(pid, int(stat[1]), "", int(stat[21]) * page, int(stat[17]), int(stat[36]), cores, cmd)


def room_processes(room_root: str | Path, proc: Path = Path("/proc")) -> list[Proc]:
    """Every process of the room at `room_root` now, with the participant it belongs to."""
    root = str(Path(room_root).resolve())
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        env, p = read_proc(int(entry.name), proc)
        if p is not None and env.get(ROOM_ENV) == root and env.get("JUPYTERHUB_USER"):
            found.append(Proc(p.pid, p.ppid, env["JUPYTERHUB_USER"], p.rss, p.threads, p.core, p.cores, p.cmd))
    return sorted(found, key=lambda p: p.pid)


def kinds(procs: list[Proc], name: str) -> dict[str, list[Proc]]:
    """The participant's processes by kind: server, kernels (the server's children: kernels, terminals), runs."""
    mine = [p for p in procs if p.user == name]
    servers = {p.pid for p in mine if p.is_server}
    out: dict[str, list[Proc]] = {"server": [], "kernels": [], "runs": []}
    for p in mine:
        out["server" if p.pid in servers else "kernels" if p.ppid in servers else "runs"].append(p)
    return out


def status_table(
    procs: list[Proc],
    slices: dict[str, dict],
    limits: dict[str, dict] | None = None,
    counted: dict[str, int | None] | None = None,
) -> str:
    """One line per participant: their server, kernels, runs, memory and tasks against their limits, cores.
    `counted`: their tasks as their cgroup counts them (with zombies), where there is one."""
    rows = [("participant", "server", "kernels", "runs", "memory", "tasks", "slice", "runs on")]
    for name, mine in slices.items():
        k = kinds(procs, name)
        every = k["server"] + k["kernels"] + k["runs"]
        lim = (limits or {}).get(name)
        memory = f"{sum(p.rss for p in every) / GIB:.1f}" + (f"/{lim['memory'] / GIB:.1f} GiB" if lim else " GiB")
        used = (counted or {}).get(name)
        tasks = f"{sum(p.threads for p in every) if used is None else used}" + (f"/{lim['tasks']}" if lim else "")
        outside = sorted({p.core for p in every} - set(mine["cores"]))
        ran = describe_cores(sorted({p.core for p in k["runs"]})).split(" ", 1)[1] if k["runs"] else "-"
        rows.append(
            (
                name,
                f"pid {k['server'][0].pid}" if k["server"] else "stopped",
                str(len(k["kernels"])),
                str(len(k["runs"])),
                memory,
                tasks,
                describe_cores(list(mine["cores"])).split(" ", 1)[1]
                + (f", GPU {','.join(map(str, mine['gpus']))}" if mine.get("gpus") else ""),
                ran + (f"  (outside its slice: {describe_cores(outside)})" if outside else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    strangers = sorted({p.user for p in procs} - set(slices))
    if strangers:
        lines.append(f"processes of names not in this room's table: {', '.join(strangers)}")
    return "\n".join(lines)


def process_list(procs: list[Proc], name: str) -> str:
    """Every process of one participant: pid, kind, memory, core, command."""
    lines = []
    for kind, ps in kinds(procs, name).items():
        for p in ps:
            lines.append(
                f"  {p.pid:>7}  {kind:<7}  {p.rss / GIB:5.2f} GiB  {p.threads:>4} tasks  core {p.core:<3}  "
                f"{p.cmd[:100]}"
            )
    return "\n".join(lines) or "  (nothing running)"


def stop_runs(procs: list[Proc], name: str, kernels: bool = False, grace: float = 5.0) -> list[int]:
    """End the participant's runs (and with `kernels`, their kernels and terminals too): SIGTERM, then
    SIGKILL to whatever is left after `grace` seconds. Returns the pids signalled."""
    k = kinds(procs, name)
    targets = [p.pid for p in k["runs"] + (k["kernels"] if kernels else [])]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signalled = [pid for pid in targets if _signal(pid, sig)]
        if not signalled or sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(pid) for pid in signalled):
            time.sleep(0.1)
    return targets


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def alive(pid: int) -> bool:
    """Alive and not a zombie waiting for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
