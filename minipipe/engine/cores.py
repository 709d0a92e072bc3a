"""Cores that pinned ranks claim, so that two runs on one machine never pin onto the same core.

    claim = claim_cores(world)          # before the workers start
    claim.cores                         # rank r pins to claim.cores[r]; () when the run is not pinned
    claim.note                          # why it is not pinned, to say once; None when it is
    claim.release()                     # when the run ends

A rank pinned to a core runs fastest when it has the core to itself (placement.pin_to_core says
why). On a machine that several people use at once — a workshop's server, where every participant
runs the same lessons — pinning rank r to the r-th core would put every participant's rank 0 on
one core. So a run takes only cores of its own process's affinity (what it was given), and claims
each with an exclusive `flock` on a file per core in a folder every run on the machine shares
(MINIPIPE_CORE_LOCKS, else `minipipe-cores` in the system's temporary folder). The kernel drops a
flock when its holder exits however it ends, so a killed run frees its cores with no clean-up.
A run that cannot claim a core for every rank claims none and runs unpinned: a half-pinned run
would have its unpinned ranks compete with its own pinned ones.
"""
from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FOLDER_ENV = "MINIPIPE_CORE_LOCKS"


def lock_folder() -> Path:
    """The folder of per-core lock files every run on this machine shares; made writable for all
    (with the sticky bit, as the temporary folder itself), since participants may be other users."""
    folder = Path(os.environ.get(FOLDER_ENV) or Path(tempfile.gettempdir()) / "minipipe-cores")
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            folder.chmod(0o1777)
        except OSError:      # made by another user a moment ago: theirs to set
            pass
    return folder


def allowed_cores() -> list[int]:
    """The cores this process may run on (its affinity: a workshop participant's slice)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


@dataclass
class Claim:
    cores: tuple[int, ...]          # one per rank; () when the run is not pinned
    note: str | None = None         # why not pinned: to tell the user once
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)            # closing the last descriptor drops the flock
        self._fds.clear()


def _try_lock(folder: Path, core: int) -> int | None:
    """An open descriptor holding core's lock, or None when another process holds it (or the
    file cannot be opened: another user's, not writable)."""
    try:
        # O_CLOEXEC: a program this process starts must not inherit, and so keep, the claim
        fd = os.open(folder / f"core-{core}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def claim_cores(ranks: int, allowed: list[int] | None = None, folder: Path | None = None) -> Claim:
    """A free core for each of `ranks` ranks among `allowed` (default: this process's affinity),
    in order, or no core at all and a note that says why."""
    allowed = sorted(allowed) if allowed is not None else allowed_cores()
    plural = "s" if ranks != 1 else ""
    if len(allowed) < ranks:
        return Claim((), f"not pinned to cores: {ranks} rank{plural} but {len(allowed)} core"
                         f"{'s' if len(allowed) != 1 else ''} for this process ({describe_cores(allowed)}), so the ranks share "
                         f"them and every measured time stretches")
    folder = folder or lock_folder()
    claim = Claim(())
    got = []
    for core in allowed:
        if len(got) == ranks:
            break
        fd = _try_lock(folder, core)
        if fd is not None:
            claim._fds.append(fd)
            got.append(core)
    if len(got) < ranks:
        busy = len(allowed) - len(got)
        claim.release()
        return Claim((), f"not pinned to cores: {ranks} rank{plural} need a free core each, but {busy} of the "
                         f"{len(allowed)} cores this process may use ({describe_cores(allowed)}) are pinned by other runs on this "
                         f"machine; running unpinned, sharing cores with them (times stretch)")
    claim.cores = tuple(got)
    return claim


def describe_cores(cores: list[int]) -> str:
    """'cores 0-3, 8' for [0, 1, 2, 3, 8]; 'core 5' for [5]."""
    runs: list[list[int]] = []
    for c in cores:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return f"core{'s' if len(cores) != 1 else ''} {text}"
