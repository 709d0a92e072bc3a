"""Cores that pinned ranks claim, so that two runs on one machine never pin onto the same core.

    claim = claim_cores(world)          # before the workers start
    claim.cores                         # rank r pins to claim.cores[r]; () when the run is not pinned
    claim.note                          # why it is not pinned (or what was set right), to say once; else None
    claim.release()                     # when the run ends

A rank pinned to a core runs fastest when it has the core to itself (placement.pin_to_core says
why). On a machine that several people use at once — a workshop's server, where every participant
runs the same lessons — pinning rank r to the r-th core would put every participant's rank 0 on
one core. So a run takes only cores of its own process's affinity (what it was given), and claims
each with an exclusive `flock` on a file per core in a folder every run on the machine shares
(MINIPIPE_CORE_LOCKS, else `minipipe-cores` in the system's temporary folder; sticky and writable by
all, mode 1777, since the runs may be different users': `lock_folder`). The kernel drops a
flock when its holder exits however it ends, so a killed run frees its cores with no clean-up.
A run that cannot claim a core for every rank claims none and runs unpinned: a half-pinned run
would have its unpinned ranks compete with its own pinned ones.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FOLDER_ENV = "MINIPIPE_CORE_LOCKS"


class LockFolderError(ValueError):
    """The shared folder of core locks is not safe to use: runs are not pinned, and this says why."""


def lock_folder() -> tuple[Path, str | None]:
    """The folder of per-core lock files every run on this machine shares, and what was repaired in
    it (None if nothing). Participants may be other users, so it must be like the temporary folder
    itself: writable by all, with the sticky bit (mode 1777) so that nobody but a file's owner may
    delete or replace it — without the bit, one user's run (or `rm`) could delete another's lock
    file, make a new one of that name and pin onto a core that run still holds. Made so when
    missing; a folder without those bits is set right where this user may (its owner, or root) and
    refused otherwise (LockFolderError); a link is never followed. As root the folder is also made
    root's: the owner of a sticky folder may still delete what is in it."""
    folder = Path(os.environ.get(FOLDER_ENV) or Path(tempfile.gettempdir()) / "minipipe-cores")
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700, parents=True)  # 1777 set below, through the descriptor, as umask allows no less
    for wait in (0.05, 0.1, 0.2, 0.4, None):
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as e:
            raise LockFolderError(
                f"the folder of core locks {folder} is not a folder (a link, or a file: "
                f"{e.strerror}); remove it, or set {FOLDER_ENV} to a folder of your own"
            ) from None
        try:
            st, me = os.fstat(fd), os.geteuid()
            mode, wrong_owner = stat.S_IMODE(st.st_mode), me == 0 and st.st_uid != 0
            if mode == 0o1777 and not wrong_owner:
                return folder, None
            if me in (0, st.st_uid):
                return folder, _repair(folder, fd, st, wrong_owner)
        finally:
            os.close(fd)
        if wait is not None:  # another user's run may have made it a moment ago and not yet set its mode
            time.sleep(wait)
    raise LockFolderError(
        f"the folder of core locks {folder} has mode {mode:04o} (owner uid {st.st_uid}), not 1777: without the "
        f"sticky bit and write for all, one user's run could delete another's core locks (or could make none of "
        f"its own). Ask its owner (or root) to `chmod 1777 {folder}`, or set {FOLDER_ENV} to a folder of your own"
    )


def _repair(folder: Path, fd: int, st: os.stat_result, wrong_owner: bool) -> str | None:
    """Set the open folder `fd` to mode 1777 (and root's, if `wrong_owner`); what to say, None if nothing:
    a folder with no lock in it yet is one a run is making now (mkdir, then this)."""
    if wrong_owner:
        os.fchown(fd, 0, 0)
    os.fchmod(fd, 0o1777)
    if not os.listdir(fd):
        return None
    was = f"mode {stat.S_IMODE(st.st_mode):04o}" + (f", owner uid {st.st_uid}" if wrong_owner else "")
    return (
        f"the folder of core locks {folder} had {was}; set to mode 1777{' and owner root' if wrong_owner else ''} "
        f"(sticky, writable by all), so that no user's run can delete another's locks"
    )


def allowed_cores() -> list[int]:
    """The cores this process may run on (its affinity: a workshop participant's slice)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


@dataclass
class Claim:
    cores: tuple[int, ...]  # one per rank; () when the run is not pinned
    note: str | None = None  # why not pinned, or the lock folder repaired: to tell the user once
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing the last descriptor drops the flock
        self._fds.clear()


def _try_lock(folder: Path, core: int) -> int | None:
    """An open descriptor holding core's lock, or None when another process holds it (or the
    file cannot be opened: another user's, unreadable)."""
    path = folder / f"core-{core}.lock"
    # O_CLOEXEC: a program this process starts must not inherit, and so keep, the claim. Read-only: a
    # flock needs no write access, so one user's lock file serves every user's later runs. An existing
    # file is opened without O_CREAT, which Linux refuses on another user's file in a sticky folder
    # (fs.protected_regular); a new one is made readable by all whatever the umask.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            os.fchmod(fd, 0o644)
        except FileExistsError:  # made by another run a moment ago
            return _try_lock(folder, core)
        except OSError:
            return None
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
        return Claim(
            (),
            f"not pinned to cores: {ranks} rank{plural} but {len(allowed)} core"
            f"{'s' if len(allowed) != 1 else ''} for this process ({describe_cores(allowed)}), so the ranks share "
            f"them and every measured time stretches",
        )
    repaired = None
    if folder is None:
        try:
            folder, repaired = lock_folder()
        except LockFolderError as e:
            return Claim((), f"not pinned to cores: {e}")
    claim = Claim((), repaired)
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
        return Claim(
            (),
            (repaired + "\n" if repaired else "")
            + f"not pinned to cores: {ranks} rank{plural} need a free core each, but {busy} of the "
            f"{len(allowed)} cores this process may use ({describe_cores(allowed)}) are pinned by other runs on this "
            f"machine; running unpinned, sharing cores with them (times stretch)",
        )
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
