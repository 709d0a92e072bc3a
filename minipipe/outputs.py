"""Where a run will write, checked before it starts: a typo in an output path must not throw away
a finished run.

    writable_folder("runs/ckpt", "checkpoint_dir")     # ValueError unless it is or can become a folder we may write
    writable_file("runs/trace.json", "--trace")        # ValueError unless the file can be written there

Nothing is created: the nearest folder that exists is probed with a temporary file that is removed
at once (permission bits alone do not say it: root may write anywhere but a read-only disk).
"""

from __future__ import annotations

import os
import tempfile


def writable_folder(path, what: str) -> None:
    """`path` is a folder we may write in, or one that can be made (its parents are folders)."""
    _check_text(path, what)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{what} {path!r} exists and is not a folder; choose a folder")
    _probe(path, what, "folder")


def writable_file(path, what: str) -> None:
    """`path` names a file that can be written: not a folder, in a folder that exists or can be made."""
    _check_text(path, what)
    if os.path.isdir(path) or str(path).endswith(os.sep):
        raise ValueError(f"{what} {path!r} is a folder; give a file name, e.g. {os.path.join(str(path), 'out.json')!r}")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path!r} exists and may not be written; choose another file")
    _probe(os.path.dirname(os.path.abspath(path)), what, "file")


def _check_text(path, what: str) -> None:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"{what} must be a path (a string), got {path!r}")


def _probe(folder: str, what: str, kind: str) -> None:
    """Write and remove a temporary file in the nearest existing folder on the way to `folder`."""
    folder = os.path.abspath(folder)
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{what}: {existing!r} is a file, so no {kind} can be made under it; check the path")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise ValueError(
            f"{what}: cannot write in {existing!r} ({e.strerror}); choose a place this user may write to"
        ) from None
