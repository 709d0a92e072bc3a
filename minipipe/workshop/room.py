"""The workshop's folder on the server: each participant's folder, their passwords, the hub's state.

    room = Room.open("room", names=["ada", "alan"])       # made, or found again
    room.furnish("ada")                                    # the course into room/participants/ada/
    room.passwords                                         # {"ada": "k7mq-2xpa-9rtd", ...}: for the teacher

    room/
      participants/NAME/lessons/      the lessons, the participant's own copy (their outputs, their edits)
      participants/NAME/exercises/    the learner's exercise notebooks (never the solutions)
      hub/room.json                   names, password hashes (what the hub reads)
      hub/passwords.csv               names and passwords, readable by the teacher only (0600)
      hub/                            JupyterHub's database, cookie secret and log (the teacher's alone)
      hub/accounts.json               each participant's Unix user, where the hub runs as root (accounts.py;
                                      their folders are then theirs alone, apart.py)

Starting again finds everything where it was: the passwords handed out stay valid, and a file in a
participant's folder is never overwritten — only what is missing is copied in (so a participant who
deleted a lesson gets a fresh one when their server starts again).
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LESSON_FILES = "[0-9][0-9]*_*.ipynb"  # 00_start_here …, and 09b_… (a lesson put after 09, the later ones kept)
TEACHER = "teacher"  # the hub's admin: no server of its own, the admin page
ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: read off a slip of paper


def course_files() -> dict[str, Path]:
    """What goes into a participant's folder: {path there: source}. The lessons, and the learner's
    exercise notebooks with their README; not the solutions, their sources or the build script."""
    files = {}
    for sub, pattern in (("lessons", LESSON_FILES), ("exercises", "[0-9][0-9]_*.ipynb")):
        for path in sorted((REPO / sub).glob(pattern)):
            files[f"{sub}/{path.name}"] = path
        if (REPO / sub / "README.md").exists():
            files[f"{sub}/README.md"] = REPO / sub / "README.md"
    if not any(k.startswith("lessons/") for k in files):
        raise ValueError(f"no lessons found in {REPO / 'lessons'}: run the workshop from a checkout of the repository")
    return files


def new_password() -> str:
    return "-".join("".join(secrets.choice(ALPHABET) for _ in range(4)) for _ in range(3))


def hash_password(password: str, salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(16)
    digest = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=2**14, r=8, p=1).hex()
    return f"scrypt${salt}${digest}"


def password_matches(password: str, stored: str) -> bool:
    try:
        _, salt, _ = stored.split("$")
    except ValueError:
        return False
    return hmac.compare_digest(hash_password(password, salt), stored)


@dataclass
class Room:
    root: Path
    names: list[str]
    hashes: dict[str, str]  # name -> scrypt hash (the teacher's too)
    passwords: dict[str, str] = field(default_factory=dict)  # name -> password, as handed out

    @property
    def hub_dir(self) -> Path:
        return self.root / "hub"

    def folder(self, name: str) -> Path:
        return self.root / "participants" / name

    @classmethod
    def open(cls, root: str | Path, names: list[str], shared_password: str | None = None) -> Room:
        """The room at `root` for `names`: made if new; found again if not (known names keep their
        passwords, new names get theirs). With `shared_password`, everyone logs in with that one."""
        root = Path(root).resolve()
        if shared_password is not None and len(shared_password) < 8:
            raise ValueError(
                "a shared workshop password needs at least 8 characters (it is all that keeps the "
                "room's servers to the room)"
            )
        if TEACHER in names:
            raise ValueError(f"{TEACHER!r} is the teacher's log-in (the hub's admin); choose other participant names")
        hub = root / "hub"
        hub.mkdir(parents=True, exist_ok=True)
        known = cls._read_passwords(hub / "passwords.csv")
        passwords = {}
        for name in [TEACHER, *names]:
            if name != TEACHER and shared_password is not None:
                passwords[name] = shared_password
            else:
                passwords[name] = known.get(name) or new_password()
        old = json.loads((hub / "room.json").read_text()) if (hub / "room.json").exists() else {}
        hashes = {n: old.get("hashes", {}).get(n) for n in passwords}
        hashes = {
            n: h if h and password_matches(passwords[n], h) else hash_password(passwords[n]) for n, h in hashes.items()
        }
        room = cls(root, list(names), hashes, passwords)
        room._write()
        return room

    @classmethod
    def load(cls, root: str | Path) -> Room:
        """The room as the hub reads it (names and hashes; no passwords)."""
        root = Path(root).resolve()
        data = json.loads((root / "hub" / "room.json").read_text())
        return cls(root, data["names"], data["hashes"])

    @staticmethod
    def _read_passwords(path: Path) -> dict[str, str]:
        if not path.exists():
            return {}
        with open(path, newline="") as f:
            return {row["name"]: row["password"] for row in csv.DictReader(f)}

    def _write(self) -> None:
        (self.hub_dir / "room.json").write_text(json.dumps({"names": self.names, "hashes": self.hashes}, indent=1))
        path = self.hub_dir / "passwords.csv"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "password"])
            writer.writerows((n, self.passwords[n]) for n in [TEACHER, *self.names])
        path.chmod(0o600)

    def furnish(self, name: str) -> list[str]:
        """Copy into `name`'s folder whatever of the course it lacks; returns what was copied."""
        return furnish(self.folder(name))


def furnish(folder: Path) -> list[str]:
    """Copy into `folder` whatever of the course it lacks; returns what was copied. Where participants
    are separated this runs as the participant (hub.py): root never writes into their folder, where a
    link they made could send a copy anywhere."""
    copied = []
    for rel, source in course_files().items():
        target = Path(folder) / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied.append(rel)
    return copied
