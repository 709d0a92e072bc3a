"""One run at a time in a checkpoint folder.

Two runs started at once in one empty folder would each see it empty and write their steps into
each other's. A run that saves checkpoints therefore holds an exclusive `flock` on
`<checkpoint_dir>/.lock` for its whole life: the process that plans it (run's caller, or
torchrun's global rank 0) takes it before any worker starts and keeps it open until the run
ends; the kernel lets go of it when that process dies, however it dies, so a killed run never
leaves the folder locked. The file keeps the holder's pid, host and start time, for the message
the second run gets. (On NFS, Linux turns flock into a lock the server keeps, so this holds across
machines that share the folder.)

Holding the lock, the run checks again what it would resume from: a run that saved into the
folder while this one was being planned is seen, not trained over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time

from .checkpoint import CheckpointError

LOCK = ".lock"


class FolderLock:
    """An open, locked `.lock` file; `release()` (or the process's end) lets go of it."""

    def __init__(self, root: str, fd: int):
        self.root, self.fd = root, fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def hold(root: str) -> FolderLock:
    """Lock `root` (made if need be) for this process, or CheckpointError naming who holds it."""
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _holder(fd)
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise CheckpointError(
                f"cannot lock checkpoint_dir {root!r} ({e.strerror}): a run needs the folder to "
                f"itself; choose a folder on a disk that supports file locks"
            ) from None
        raise CheckpointError(
            f"checkpoint_dir {root!r} is in use by another run ({holder}): two runs in one folder "
            f"would write their checkpoints into each other's. Wait for that run to end (its lock "
            f"goes when its process does), or choose another checkpoint_dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(
        fd,
        json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        ).encode(),
    )
    return FolderLock(root, fd)


def _holder(fd: int) -> str:
    """Who holds the lock, as far as its file says."""
    try:
        who = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pid {who['pid']} on {who['host']}, since {who['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet written its name"


@contextlib.contextmanager
def holding(plans: list):
    """Hold the checkpoint folder of every plan that saves for the block's life, each checked
    again under the lock (run_checks.check_checkpoint) to resume from what it was planned from."""
    from .run_checks import check_checkpoint

    roots = [os.path.abspath(pl.config.checkpoint_dir) for pl in plans if getattr(pl.config, "checkpoint_dir", None)]
    twice = sorted({r for r in roots if roots.count(r) > 1})
    if twice:
        raise CheckpointError(
            f"two of these runs save to one checkpoint_dir ({', '.join(twice)}): they would write "
            f"into each other's checkpoints; give each its own folder"
        )
    with contextlib.ExitStack() as stack:
        for pl in plans:
            root = getattr(pl.config, "checkpoint_dir", None)
            if not root:
                continue
            stack.callback(hold(root).release)
            now, _ = check_checkpoint(pl.config, pl.meta["param_shapes"])
            if now != pl.resume_from:
                raise CheckpointError(
                    f"checkpoint_dir {root!r} changed while this run was being planned (it would "
                    f"resume from {now or 'nothing'}, planned from {pl.resume_from or 'nothing'}): "
                    f"another run saved into it. Nothing was started; start the run again"
                )
        yield
