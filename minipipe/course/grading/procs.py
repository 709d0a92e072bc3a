"""Processes that grading starts, and ending all of them.

Every process a grading starts carries a token in its environment (`MINIPIPE_GRADING`), inherited
by whatever it starts in turn: the judge, its sandbox, the sandbox's worker processes, and a child
that put itself in a session or process group of its own (setsid) or was orphaned by a double
fork. `end_all(root, token)` stops the process tree under `root` and every process that carries
the token, and makes sure none is left: the tree is frozen first (SIGSTOP, so that nothing forks
while it is being killed), then killed, until a pass finds nobody. The judge and the sandbox also
make themselves child subreapers (Linux), so that orphans below them stay in their tree instead of
going to init.
"""

from __future__ import annotations

import os
import signal
import time

TOKEN = "MINIPIPE_GRADING"
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans below this process are re-parented to it (Linux; elsewhere nothing happens)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} for every process visible in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), fields[0])
    return out


def _carries(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TOKEN}={token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def descendants(root: int, table: dict | None = None) -> set[int]:
    """Living processes below `root` (not `root` itself), by their parent links."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, state) in table.items():
        if state not in ("Z", "X"):
            children.setdefault(parent, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def members(root: int | None, token: str | None) -> set[int]:
    """The processes of one grading: the tree under `root` (and root) and every carrier of `token`."""
    if not os.path.isdir("/proc"):
        return {root} if root else set()
    table = _table()
    found = set()
    if root is not None:
        found |= descendants(root, table)
        if root in table and table[root][1] not in ("Z", "X"):
            found.add(root)
    if token:
        found |= {pid for pid, (_, state) in table.items() if state not in ("Z", "X") and _carries(pid, token)}
    found.discard(os.getpid())
    return found


def end_all(root: int | None, token: str | None = None, rounds: int = 50) -> None:
    """Stop every process of one grading (see the module docstring); returns when none is left
    (or after `rounds` passes, each of a few milliseconds)."""
    stopped: set[int] = set()
    for _ in range(rounds):
        alive = members(root, token)
        if not alive:
            break
        for pid in alive - stopped:  # frozen first: a process that forks meanwhile is found next pass
            _signal(pid, signal.SIGSTOP)
        stopped |= alive
        if members(root, token) <= stopped:  # nobody new: the whole tree is frozen
            for pid in stopped:
                _signal(pid, signal.SIGKILL)
            time.sleep(0.01)
            _reap(stopped)
    _reap(stopped)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pids) -> None:
    """Collect those of `pids` that are our own children and have ended (orphans re-parented to a
    subreaper are its children too); the others are their parents' to collect."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
