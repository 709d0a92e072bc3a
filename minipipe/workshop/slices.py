"""Each participant's share of the machine: a slice of CPU cores and of GPUs, none shared when avoidable.

    room = make_slices(["ada", "alan"], cores=list(range(64)), gpus=8)
    print(table(room))
    room[0].cores, room[0].gpus              # (0, 1, ..., 31), (0, 1, 2, 3)

Every participant gets the same number of cores, contiguous and disjoint (their server's
affinity, which every kernel and every rank it starts inherits); the cores left over by the
division stay with the hub. GPUs: an equal disjoint share when there are at least as many as
participants, else one each, round robin, shared (and the table says with whom) — a lesson runs
all its ranks on the GPUs it is given (engine/placement.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engine.cores import describe_cores

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # a JupyterHub user name that is also a folder name
WIDEST_LESSON = 8  # processes: lesson 13 runs PP×DP×TP = 2×2×2
RANKS_PER_CORE = 4  # engine/run_checks.py refuses more processes per core than this


@dataclass(frozen=True)
class Slice:
    name: str
    cores: tuple[int, ...]
    gpus: tuple[int, ...]  # CUDA device numbers; () when the machine has none
    shares_gpu_with: tuple[str, ...] = ()

    @property
    def cuda_visible_devices(self) -> str | None:
        """The value of CUDA_VISIBLE_DEVICES for this participant's server, or None to leave it unset."""
        return ",".join(map(str, self.gpus)) if self.gpus else None


def check_names(names: list[str]) -> list[str]:
    if not names:
        raise ValueError("a workshop needs at least one participant; pass --participants N or --names a,b,c")
    bad = [n for n in names if not NAME.match(n)]
    if bad:
        raise ValueError(
            f"participant names must be lower-case letters, digits, '-' or '_', starting with a letter "
            f"(they become log-in names and folder names); not {', '.join(map(repr, bad))}"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(
            f"participant names must differ; {', '.join(twice)} appear{'s' if len(twice) == 1 else ''} more than once"
        )
    return names


def make_slices(names: list[str], cores: list[int], gpus: int) -> list[Slice]:
    """One slice per participant, from the machine's `cores` (the hub's affinity) and `gpus` (how many)."""
    names = check_names(list(names))
    n, cores = len(names), sorted(cores)
    if len(cores) < n:
        raise ValueError(
            f"{n} participants but {len(cores)} CPU cores: each participant needs a core of their own, "
            f"or one participant's run slows down everyone's. Invite at most {len(cores)} here, or split "
            f"the room over two machines"
        )
    per = len(cores) // n
    slices = []
    for i, name in enumerate(names):
        if gpus >= n:
            mine = tuple(range(i * (gpus // n), (i + 1) * (gpus // n)))
            others: tuple[str, ...] = ()
        elif gpus > 0:
            mine = (i % gpus,)
            others = tuple(names[j] for j in range(i % gpus, n, gpus) if j != i)
        else:
            mine, others = (), ()
        slices.append(Slice(name, tuple(cores[i * per : (i + 1) * per]), mine, others))
    return slices


def warnings_for(slices: list[Slice]) -> list[str]:
    """What the teacher should know before the room logs in."""
    out = []
    fewest = min(len(s.cores) for s in slices)
    if fewest * RANKS_PER_CORE < WIDEST_LESSON:
        out.append(
            f"{fewest} core{'s' if fewest > 1 else ''} per participant: lesson 13 starts {WIDEST_LESSON} "
            f"processes and refuses more than {RANKS_PER_CORE} per core, so it will not run; with "
            f"{-(-WIDEST_LESSON // RANKS_PER_CORE)} cores each it does"
        )
    if any(s.shares_gpu_with for s in slices):
        out.append(
            "fewer GPUs than participants: each GPU is shared by the participants the table names, so "
            "their GPU timings vary with what the others run"
        )
    return out


def table(slices: list[Slice], hub_cores: list[int] | None = None) -> str:
    """The teacher's table: who gets which cores and GPUs."""
    rows = [("participant", "cores", "GPUs (CUDA_VISIBLE_DEVICES)", "shares its GPU with")]
    for s in slices:
        rows.append(
            (
                s.name,
                describe_cores(list(s.cores)).split(" ", 1)[1] + f"  ({len(s.cores)})",
                s.cuda_visible_devices or "none",
                ", ".join(s.shares_gpu_with) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    given = {c for s in slices for c in s.cores}
    left = [c for c in (hub_cores or []) if c not in given]
    if left:
        lines.append(f"left to the hub: {describe_cores(left)}")
    return "\n".join(lines)
