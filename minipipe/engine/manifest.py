"""What belongs to a checkpoint step, so that a resume never trains on a mixture.

A step's meta.json carries its manifest: the run that wrote it (`run_id`, kept by every resume of
that run), the step, and each rank file's size and SHA-256 as its writer saw it on disk. Each rank
file also says its own run and step. Resuming checks them all, and names what does not belong:

    rank1.pt holds step 5, not step 10      a file copied from another step's folder
    rank1.pt was written by run 3f2a...     one rank's file from another run of the same model
    rank1.pt is not the file recorded       changed or replaced after it was saved (size or hash)

A step folder from a minipipe that wrote no manifest (no "files" in meta.json) is still read: its
rank files are checked for their step, and the resume says that their sizes and hashes could not
be (`unverified`).
"""

from __future__ import annotations

import hashlib
import os
import uuid

RUN = "run_id"  # in meta.json and in every rank file
FILES = "files"  # in meta.json: {"rank0.pt": {"bytes": ..., "sha256": ...}, ...}


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def entry(file: str) -> dict:
    """A rank file's size and hash, read back from the disk it was written to."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": os.path.getsize(file), "sha256": digest.hexdigest()}


def problem(file: str, state: dict, meta: dict) -> str | None:
    """What says that `file` (its loaded `state`) does not belong to the step `meta` describes,
    or None. Checked in this order so that the message says where a stray file came from."""
    name, redo = os.path.basename(file), "resume from another checkpoint or start a fresh checkpoint_dir"
    if state.get("step") != meta["step"]:
        return (
            f"{file} holds step {state.get('step')}, not step {meta['step']}: it was copied from another "
            f"step's folder, so this step mixes rank files of different steps; {redo}"
        )
    if RUN in meta and state.get(RUN) != meta[RUN]:
        return (
            f"{file} was written by run {state.get(RUN) or '(one without a run id)'}, this step by run "
            f"{meta[RUN]}: it is another run's file (of the same model), so this step mixes two runs; {redo}"
        )
    if FILES not in meta:
        return None
    recorded = meta[FILES].get(name)
    if recorded is None:
        return f"{file} is not in this step's manifest (meta.json lists {', '.join(sorted(meta[FILES]))}); {redo}"
    found = entry(file)
    if found != recorded:
        return (
            f"{file} is not the file this step recorded ({recorded['bytes']} bytes, sha256 "
            f"{recorded['sha256'][:12]}...; it has {found['bytes']} bytes, sha256 {found['sha256'][:12]}...): "
            f"it was changed or replaced after it was saved; {redo}"
        )
    return None


def listed_problem(path: str, meta: dict, files: list[str]) -> str | None:
    """The manifest lists exactly the rank files the run's writers wrote."""
    if FILES not in meta:
        return None
    wanted, listed = sorted(os.path.basename(f) for f in files), sorted(meta[FILES])
    if wanted != listed:
        return (
            f"{os.path.join(path, 'meta.json')}'s manifest lists {', '.join(listed) or 'no file'} but the run's "
            f"writers wrote {', '.join(wanted)}: the step is incomplete or edited; resume from another checkpoint "
            f"or start a fresh checkpoint_dir"
        )
    return None


def unverified(path: str, meta: dict) -> str | None:
    """The word a resume from a step without a manifest says, or None."""
    if FILES in meta:
        return None
    return (
        f"{os.path.basename(path)} has no manifest (it was saved by a minipipe that wrote none): its rank files "
        f"were checked to hold step {meta['step']}, but not against their sizes and hashes, nor for their run"
    )
