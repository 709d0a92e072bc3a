"""For tests that run as other Unix users: skip where they cannot, unless MINIPIPE_REQUIRE_USERS=1
(CI, which runs as root): then fail, so that a CI that lost root does not pass them by.

    users_or_skip()                         # root, with useradd: or skip (fail in CI), saying why
    root_or_skip()                          # root: a forked child may become any uid
    with open_to_others([sys.executable]):  # the folders on the way made passable for the test's users
        ...
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest

from minipipe.workshop.accounts import why_not_separated
from minipipe.workshop.apart import closed_folder


def users_or_skip() -> None:
    """Root, with useradd: the workshop's participants can be users of their own."""
    why = why_not_separated()
    if why is not None:
        _skip(f"needs root to run participants as users of their own: {why}")


def root_or_skip() -> None:
    """Root: a forked child may become any uid (no user need exist for it)."""
    if os.geteuid() != 0:
        _skip("needs root, to run as two other users")


def _skip(message: str) -> None:
    if os.environ.get("MINIPIPE_REQUIRE_USERS") == "1":
        pytest.fail(message + " (MINIPIPE_REQUIRE_USERS=1)", pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def open_to_others(paths):
    """Let other users pass (o+x, never o+r) every folder on the way to `paths` that is closed to them
    — as a teacher does when `workshop start` says so (this machine's Python may live under /root) —
    and give every folder its mode back afterwards."""
    opened: dict[Path, int] = {}
    try:
        for path in paths:
            while (closed := closed_folder(Path(path))) is not None:
                opened[closed] = stat.S_IMODE(closed.stat().st_mode)
                closed.chmod(opened[closed] | stat.S_IXOTH)
        yield
    finally:
        for folder, mode in opened.items():
            folder.chmod(mode)
