"""What one participant's server may use, so that one runaway run cannot take the room down.

    limits = room_limits(slices, memory=machine_memory())   # {name: Limits(memory, tasks, cores)}
    groups = Cgroups.find(room_id("room"))                  # None where this user may make none
    groups.make("ada", limits["ada"])                       # in the hub, before ada's server starts
    groups.join("ada")                                      # in the server's child, before it runs

A participant's server, its kernels and every rank they start share one budget: memory (their share
of the machine's, swap included), tasks (processes and threads together: a loop that starts ranks
stops at the limit instead of filling the machine's process table) and the cores of their slice.
The kernel enforces them through a cgroup per participant — cgroup v2, or v1's memory, pids and
cpuset hierarchies — made under the hub's own cgroup, so they only ever tighten what the hub has.
Past the memory limit the kernel's OOM killer ends a process of that participant only; past the
task limit their next fork fails. Making cgroups needs write access to the cgroup tree: root, or a
tree delegated to the hub's user. Where there is none, nothing here is enforced and the report
says so; the cores are still the server's affinity (hub.py), and `minipipe workshop status` and
`stop` (procs.py) still show and end what each participant runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
TASKS = 1024  # a JupyterLab server ~30 threads, a kernel ~20, a CPU rank ~10-20: lesson 13's 8 ranks fit
HUB_SHARE = 0.1  # of the machine's memory kept for the hub, the proxy and the system (at least 2 GiB)
LESSON_MEMORY = 2 * GIB  # what the widest lesson needs on the CPU, with room to spare
CONTROLLERS = ("memory", "pids", "cpuset")


@dataclass(frozen=True)
class Limits:
    memory: int  # bytes: the server and everything it starts, together
    tasks: int  # processes and threads, together
    cores: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.memory / GIB:.1f} GiB, {self.tasks} tasks"


def machine_memory(meminfo: str = "/proc/meminfo") -> int:
    """The machine's memory in bytes (MemTotal)."""
    for line in Path(meminfo).read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"{meminfo} has no MemTotal line")


def room_limits(slices, memory: int, per_participant: int | None = None, tasks: int = TASKS) -> dict[str, Limits]:
    """Each participant's limits: an equal share of `memory` (less the hub's), or `per_participant` bytes."""
    if tasks < 64:
        raise ValueError(
            f"--max-tasks {tasks} is too few for a JupyterLab server and a kernel (they start ~50 "
            f"threads); give at least 64, or the default {TASKS}"
        )
    share = int((memory - max(memory * HUB_SHARE, 2 * GIB)) // len(slices))
    if per_participant is not None:
        if per_participant * len(slices) > memory:
            raise ValueError(
                f"--memory {per_participant / GIB:g} GiB each for {len(slices)} participants is "
                f"{per_participant * len(slices) / GIB:.0f} GiB, more than this machine's "
                f"{memory / GIB:.0f} GiB; give at most {share / GIB:.1f}"
            )
        share = per_participant
    return {s.name: Limits(share, tasks, tuple(s.cores)) for s in slices}


def memory_warning(limits: dict[str, Limits]) -> str | None:
    least = min(lim.memory for lim in limits.values())
    if least < LESSON_MEMORY:
        return (
            f"{least / GIB:.1f} GiB of memory per participant: the lessons want about {LESSON_MEMORY // GIB} GiB "
            f"each; invite fewer, or use a machine with more memory"
        )
    return None


def room_id(room_root: str | Path) -> str:
    """A name for the room's cgroup: two rooms on one machine never share one."""
    return "minipipe-room-" + hashlib.sha1(str(Path(room_root).resolve()).encode()).hexdigest()[:8]


class Cgroups:
    """The room's cgroups: one folder per participant in each hierarchy that holds a controller."""

    def __init__(self, version: int, bases: dict[str, Path]):
        self.version = version  # 1 or 2
        self.bases = bases  # controller -> the room's folder in it (v2: one folder for all)

    @classmethod
    def find(cls, room: str, proc: str = "/proc/self", need_write: bool = True) -> Cgroups | None:
        """The room's cgroups under this process's own, if the cgroup tree lets this user make them."""
        found = cls._layout(room, Path(proc))
        if found is None:
            return None
        if need_write and not all(_writable(b.parent) for b in found.bases.values()):
            return None
        return found

    @classmethod
    def _layout(cls, room: str, proc: Path) -> Cgroups | None:
        mounts = [line.split() for line in (proc / "mounts").read_text().splitlines() if line.strip()]
        own = {}  # controller (or "" for v2) -> this process's cgroup path
        for line in (proc / "cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
        v1 = {}
        for _, where, kind, options, *_ in mounts:
            if kind == "cgroup":
                for c in CONTROLLERS:
                    if c in options.split(",") and c in own:
                        v1[c] = Path(where + own[c]) / room
        if "memory" in v1 and "pids" in v1:
            return cls(1, v1)
        for _, where, kind, *_ in mounts:
            if kind == "cgroup2" and "" in own:
                # v2: a cgroup with processes cannot hand controllers to children, so the room sits beside
                # the hub's own cgroup, under its parent (the root's when the hub's is the root)
                mine = Path(where + own[""])
                parent = mine.parent if own[""] != "/" else mine
                offered = (
                    (parent / "cgroup.controllers").read_text().split()
                    if (parent / "cgroup.controllers").exists()
                    else []
                )
                if "memory" in offered and "pids" in offered:
                    return cls(2, {"": parent / room})
        return None

    def folders(self, name: str) -> dict[str, Path]:
        return {c: base / name for c, base in self.bases.items()}

    def make(self, name: str, limits: Limits) -> None:
        """The participant's cgroup with its limits (again at each start: the teacher may have changed them)."""
        if self.version == 2:
            base = self.bases[""]
            base.mkdir(exist_ok=True)
            offered = (base / "cgroup.controllers").read_text().split()
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS if c in offered))
            mine = base / name
            mine.mkdir(exist_ok=True)
            _write(mine / "memory.max", str(limits.memory))
            _write(mine / "memory.swap.max", "0", optional=True)
            _write(mine / "pids.max", str(limits.tasks))
            if (mine / "cpuset.cpus").exists():
                _write(mine / "cpuset.cpus", ",".join(map(str, limits.cores)))
            return
        for controller, mine in self.folders(name).items():
            for folder in (mine.parent, mine):
                folder.mkdir(exist_ok=True)
                if controller == "cpuset":  # v1: a cpuset with no cpus or mems takes no process
                    if not (folder / "cpuset.mems").read_text().strip():
                        _write(folder / "cpuset.mems", (folder.parent / "cpuset.mems").read_text().strip())
                    cpus = (
                        ",".join(map(str, limits.cores))
                        if folder == mine
                        else (folder.parent / "cpuset.cpus").read_text().strip()
                    )
                    _write(folder / "cpuset.cpus", cpus)
        folders = self.folders(name)
        memsw = folders["memory"] / "memory.memsw.limit_in_bytes"  # memory with swap: never below memory alone,
        _write(memsw, str(limits.memory), optional=True)  # so written on both sides of it
        _write(folders["memory"] / "memory.limit_in_bytes", str(limits.memory))
        _write(memsw, str(limits.memory), optional=True)
        _write(folders["pids"] / "pids.max", str(limits.tasks))

    def join(self, name: str, pid: int | None = None) -> None:
        """Move `pid` (default: this process) into the participant's cgroup; its children follow."""
        for folder in dict.fromkeys(self.folders(name).values()):
            _write(folder / "cgroup.procs", str(pid or os.getpid()))

    def pids(self, name: str) -> set[int]:
        """Every process in the participant's cgroup (empty when it was never made)."""
        procs = self.folders(name)["memory" if self.version == 1 else ""] / "cgroup.procs"
        try:
            return {int(p) for p in procs.read_text().split()}
        except OSError:
            return set()

    def tasks(self, name: str) -> int | None:
        """The participant's tasks as the kernel counts them against the limit (zombies not yet reaped
        included), or None when their cgroup was never made."""
        try:
            return int((self.folders(name)["pids" if self.version == 1 else ""] / "pids.current").read_text())
        except (OSError, ValueError):
            return None

    def remove(self, name: str) -> None:
        """The participant's cgroup folders, once nothing runs in them (and the room's, once empty)."""
        for folder in self.folders(name).values():
            for empty in (folder, folder.parent):
                try:
                    empty.rmdir()
                except OSError:  # something still runs there, or another participant's folder
                    break

    @classmethod
    def from_settings(cls, settings: dict | None) -> Cgroups | None:
        """From what `workshop start` wrote ({'version', 'bases'}), or None."""
        if not settings:
            return None
        return cls(settings["version"], {c: Path(b) for c, b in settings["bases"].items()})

    def settings(self) -> dict:
        return {"version": self.version, "bases": {c: str(b) for c, b in self.bases.items()}}

    def kill(self, name: str) -> int:
        """SIGKILL whatever is left in the participant's cgroup (after their server stopped): how many."""
        left = self.pids(name)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(left)

    def describe(self) -> str:
        if self.version == 2:
            what = "memory with swap, tasks, cores"
        else:
            swap = (self.bases["memory"].parent / "memory.memsw.limit_in_bytes").exists()
            what = ", ".join(
                ["memory with swap" if swap else "memory (swap not counted)", "tasks"]
                + (["cores"] if "cpuset" in self.bases else [])
            )
        where = ", ".join(str(b) for b in self.bases.values())
        return f"enforced by the kernel, a cgroup v{self.version} per participant ({what}) in {where}"


def describe_enforcement(groups: Cgroups | None) -> str:
    if groups is not None:
        return groups.describe()
    return (
        "NOT enforced: this user may not make cgroups here (run the hub as root, or in a cgroup tree delegated "
        "to its user). Cores are still each server's affinity; `minipipe workshop status` shows each "
        "participant's memory and processes, and `minipipe workshop stop NAME` ends their runs"
    )


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK)


def _write(path: Path, value: str, optional: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if not optional:
            raise
