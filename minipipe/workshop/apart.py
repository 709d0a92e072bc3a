"""What each participant may read, where each runs as their own user (accounts.py).

    locked = lock_teacher_only(REPO)           # the solutions and all that holds them: the teacher's only
    close_room(room)                           # the room's folders: passable, not listable; hub/ closed
    give_folder(folder, account.uid, account.gid)   # theirs, 0700, every file in it kept
    problems = probe(account, room, other)     # tried as the participant: what they could or could not read

The course stays readable to all: the lessons, the learner notebooks, the package, the Python it
runs on. The solutions, their sources, the notebooks executed from them (artifacts/, build/) and
git's history of them are the teacher's: mode 0700, so root and the checkout's owner read them.
A participant's folder is theirs and the teacher's (root's); the room's folder lets each pass to
their own folder without listing the others; hub/ (passwords, the hub's database) is root's.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from .owner import give_folder
from .room import LESSON_FILES, REPO, furnish

TEACHER_ONLY = ("exercises/solutions", "exercises/source", "artifacts", "build", ".git")


def lock_teacher_only(repo: Path = REPO) -> tuple[list[Path], list[str]]:
    """Close to all but their owner (and root) the checkout's folders that hold an answer: (the
    folders closed, notes on what could not be)."""
    locked, notes = [], []
    for rel in TEACHER_ONLY:
        path = repo / rel
        if path.is_symlink() or not path.exists():
            continue
        if path.is_dir():
            path.chmod(stat.S_IMODE(path.stat().st_mode) & 0o700)
            locked.append(path)
        elif rel == ".git":  # a worktree: its history is in the main checkout's .git, elsewhere
            where = path.read_text().split("gitdir:", 1)[-1].strip()
            notes.append(
                f"this checkout is a git worktree: the history of the solutions is in {where} (and the "
                f"folders above it), which stays as it is; `chmod 700` that checkout's .git if others "
                f"must not read it"
            )
    return locked, notes


def close_room(room_root: Path) -> None:
    """The room's folder and participants/: passable (to one's own folder) but not listable; hub/: root's."""
    for folder, mode in ((room_root, 0o711), (room_root / "participants", 0o711), (room_root / "hub", 0o700)):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(mode)


def closed_folder(path: Path) -> Path | None:
    """The first folder above `path` (links resolved) that other users may not pass, or None."""
    for folder in reversed(Path(os.path.realpath(path)).parents):
        try:
            mode = folder.stat().st_mode
        except OSError:
            return folder
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return folder
    return None


PROBE = """
import json, os, sys
out = {}
for label, (path, kind) in json.loads(sys.argv[1]).items():
    try:
        os.listdir(path) if kind == "folder" else open(path, "rb").close()
        out[label] = "read"
    except PermissionError:
        out[label] = "refused"
    except OSError as e:
        out[label] = f"{type(e).__name__}: {e.strerror}"
try:
    import minipipe, jupyterhub, ipykernel
    out["the course's Python packages"] = "read"
except Exception as e:
    out["the course's Python packages"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def python_problem(python: Path = Path(sys.executable)) -> str | None:
    """Why other users could not run this Python (a folder on the way closed to them), or None."""
    closed = closed_folder(python)
    if closed is None:
        return None
    return (
        f"participants could not run this Python, {python} ({os.path.realpath(python)}): {closed} is closed to "
        f"other users (mode {stat.S_IMODE(closed.stat().st_mode):04o}). Use a Python and a venv that others may "
        f"read (installed under /usr, /opt or /srv), or let others pass through it: `chmod o+x {closed}` (they may "
        f"then open what they can name inside it, not list it)"
    )


def probe(account, room_root: Path, other: Path | None, repo: Path = REPO, locked: list[Path] = ()) -> list[str]:
    """Run a small program as `account` that tries to read what a participant must (their folder,
    the lessons, the course's packages) and what they must not (the solutions, another's folder
    `other`, the hub's passwords): what went other than it must, each with what to do."""
    python = Path(sys.executable)
    lesson = next(iter(sorted((repo / "lessons").glob(LESSON_FILES))), repo / "lessons")
    must = {"their own folder": (account.home, "folder"), "the lessons": (lesson, "file")}
    must_not = {str(p.relative_to(repo)) if p.is_relative_to(repo) else str(p): (p, "folder") for p in locked}
    must_not["the hub's passwords and database"] = (room_root / "hub", "folder")
    if other is not None:
        must_not["another participant's folder"] = (other, "folder")
    try:
        done = account.run(
            [
                str(python),
                "-c",
                PROBE,
                json.dumps({k: [str(p), kind] for k, (p, kind) in {**must, **must_not}.items()}),
            ],
            timeout=120,
        )
    except OSError as e:
        if e.filename == str(account.home):  # Popen's cwd: their folder, unreachable
            return [
                f"{account.login} cannot reach its folder {account.home}: {e.strerror}" + _closed_hint(account.home)
            ]
        return [f"participants cannot run this Python, {python}: {e}"]
    try:
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"a program run as {account.login} failed: {done.stderr.strip()[-800:]}"]
    problems = []
    for label, (path, _) in {**must, "the course's Python packages": (repo, "")}.items():
        if seen.get(label) != "read":
            problems.append(f"{account.login} cannot read {label} ({path}): {seen.get(label)}" + _closed_hint(path))
    for label, (path, _) in must_not.items():
        if seen.get(label) != "refused":
            problems.append(
                f"{account.login} can read {label} ({path}): {seen.get(label)}; it must be closed to "
                f"participants (chmod 700 {path})"
            )
    return problems


def _closed_hint(path: Path) -> str:
    closed = closed_folder(path)
    if closed is None:
        return ""
    return (
        f" — {closed} is closed to other users (mode {stat.S_IMODE(closed.stat().st_mode):04o}): put the room and "
        f"the checkout where others may pass (/srv, /opt), or `chmod o+x {closed}`"
    )


FURNISH = "import sys; from minipipe.workshop.room import furnish; furnish(sys.argv[1])"


def keep_apart(room, names: list[str], same_user: bool = False, make: bool = True) -> tuple[dict[str, str], list[str]]:
    """Separate the room's participants where this process may (root, `same_user` not asked for):
    their users made, leftovers of an earlier hub ended, the folders given and closed, the course
    copied in as each participant, the answers locked, and all of it tried as a participant. With
    `make` False (--dry-run) nothing on the system changes. Returns ({participant: Unix user} for the
    hub, {} when not separated; the report's lines). Raises ValueError when a participant could not
    work or could read what they must not, with what to do."""
    from .accounts import FILE as ACCOUNTS
    from .accounts import kill_processes, login_of, make_accounts, why_not_separated

    why = "--same-user was given" if same_user else why_not_separated()
    if why is not None:
        if make:
            (room.hub_dir / ACCOUNTS).unlink(missing_ok=True)  # users of an earlier start are not this one's
        for name in names:
            room.furnish(name)
        return {}, [
            f"participants NOT separated: {why}, so every server runs as this one user and a participant's "
            f"kernel can read the solutions and every other participant's folder. Run the hub as root to "
            f"give each participant a Unix user of their own"
        ]
    logins = {n: login_of(n) for n in names}
    if not make:
        for name in names:
            room.furnish(name)
        return {}, [
            f"participants will run as their own Unix users ({', '.join(logins.values())}), made when the "
            f"hub starts (not by --dry-run)"
        ]
    close_room(room.root)
    for what, path in (("their folders", room.root / "participants" / names[0]), ("the lessons", REPO / "lessons")):
        closed = closed_folder(path)
        if closed is not None:
            raise ValueError(
                f"participants could not reach {what} ({path.parent}):"
                + _closed_hint(path)[2:]
                + "; or start with --same-user (participants NOT separated)"
            )
    problem = python_problem()
    if problem is not None:
        raise ValueError(problem + "; or start with --same-user (participants NOT separated)")
    accounts = make_accounts(room.root, names)
    kill_processes({a.uid for a in accounts.values()})  # what a hub that died left running
    left = []
    for account in accounts.values():
        account.home.mkdir(exist_ok=True)
        left += give_folder(account.home, account.uid, account.gid)
        try:
            account.call(furnish, account.home)
        except ValueError as e:
            raise ValueError(
                f"could not copy the course into {account.home} {e}" + _closed_hint(REPO / "lessons")
            ) from None
    locked, notes = lock_teacher_only()
    first, *rest = accounts.values()
    problems = probe(first, room.root, rest[0].home if rest else None, locked=locked)
    if problems:
        raise ValueError(
            "participants would not be kept apart as they must:\n  - "
            + "\n  - ".join(problems)
            + "\n(or start with --same-user: every server as this user, participants NOT separated)"
        )
    lines = [
        f"participants kept apart: each runs as their own Unix user ({', '.join(logins.values())}; made for "
        f"this room, `minipipe workshop cleanup --room {room.root}` removes them), in a folder that only they "
        f"and you may read; the answers are yours alone ({', '.join(str(p) for p in locked)}); tried as "
        f"{first.login} just now"
    ]
    lines += [f"note: {n}" for n in notes]
    if left:
        lines.append(f"note: left as they were in participants' folders: {'; '.join(left[:5])}")
    return logins, lines
