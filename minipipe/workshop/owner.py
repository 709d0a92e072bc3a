"""A folder given to a Unix user with care: a participant's folder made theirs (apart.py, hub.py),
and given back to root when their account is removed (accounts.py). Root walks a folder that
someone else writes to, so it follows none of their links.

    left = give_folder(folder, account.uid, account.gid)   # theirs, 0700; returns what was left alone
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def give_folder(folder: Path, uid: int, gid: int) -> list[str]:
    """Make `folder` and everything in it `uid`'s, readable by them alone (0700 folders, files their
    own mode less group and others), contents untouched. The folder is the participant's, so root
    walks it with care: links are never followed (a link itself changes owner, not what it points
    to), and a file with more than one name is left alone (it may be a hard link to a file outside).
    Returns what was left alone."""
    left = []
    top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(top, uid, gid)
        os.fchmod(top, 0o700)
    finally:
        os.close(top)
    for where, dirs, files, dirfd in os.fwalk(folder, follow_symlinks=False):
        for name in dirs + files:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
                elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    left.append(f"{Path(where) / name} (a file with {st.st_nlink} names)")
                else:
                    _give(name, dirfd, st, uid, gid)
            except OSError as e:  # gone meanwhile, or swapped for something that is not what was seen
                left.append(f"{Path(where) / name} ({e.strerror})")
    return left


def _give(name: str, dirfd: int, seen: os.stat_result, uid: int, gid: int) -> None:
    """Owner and mode of the entry `name` in `dirfd`, through a descriptor of what `seen` was (a link
    swapped in after the stat is not followed: O_NOFOLLOW; anything else swapped in is not touched)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise OSError(0, "changed while being given")
        os.fchown(fd, uid, gid)
        own = stat.S_IMODE(st.st_mode) & 0o700
        os.fchmod(fd, own | (0o700 if stat.S_ISDIR(st.st_mode) else 0o600))
    finally:
        os.close(fd)
