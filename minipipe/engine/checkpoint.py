"""Checkpoints that survive being killed, and that any schedule can resume from.

Layout under the checkpoint folder:

    latest              the name of the newest complete checkpoint ("step-000010")
    .lock               held by the one run using the folder (folder_lock.py)
    step-000010/        one file per rank, plus meta.json (with the step's manifest: manifest.py)
    step-000020.tmp/    a checkpoint being written (or one a kill interrupted: ignored)

Each rank writes its file under a temporary name and renames it; rank 0 renames the folder
and then `latest` once every rank has written. A kill at any moment leaves `latest` pointing
at a complete checkpoint.

Each step knows what belongs to it: meta.json records the run's id, the step and each rank file's
size and SHA-256, and each rank file its run and step, so a step that mixes files of two steps or
two runs is damaged, named as such (manifest.py).

Nothing saved is lost: resuming takes the newest intact step folder (`newest`), whatever `latest`
says, and names any newer one it had to skip as damaged, and why; a folder whose steps are all
damaged is refused, never taken for "start from scratch". A save that lands on a damaged step's
name sets that folder aside (`step-000020.damaged`) instead of deleting it. A write that fails (a
full disk, a read-only one) says so in words, and which checkpoint is still intact.

Parameters and optimizer state are stored by their name in the whole model (`"3.linear.weight"`),
not by stage, so a run may resume with another schedule — even another p — and every rank
picks out the layers it now owns. The data position is the step: batches are a pure function
of (seed, step).

On a mesh (p·dp·cp·tp ranks) one rank writes each distinct shard: the replicas of data parallelism
hold the same tensors, so only the ranks of replica 0 write; a tensor-parallel rank writes its
slice of each split parameter, with which slice it is. Loading puts the slices back together and
cuts them again for the loading run's tp, so a run may resume with another dp or tp too.

A checkpoint is data, never code: rank files are read with `torch.load(weights_only=True)`, which
rebuilds tensors, numbers and containers and refuses anything else, so a checkpoint folder passed
around cannot run code when loaded. A missing, cut-short or foreign file is reported (CheckpointError,
a ValueError) with its name, what is wrong with it and what to do, before any process starts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import shutil
import zipfile

import torch
import torch.distributed as dist

from ..parallel.tensor import Shard, shard, unshard
from . import manifest

LATEST = "latest"
STEP_NAME = re.compile(r"step-(\d{6,})")  # a complete checkpoint's folder; "….tmp" is one being written
KEYS = ("step", "params", "optimizer", "rng")  # what each rank file holds


class CheckpointError(ValueError):
    """A checkpoint file that is missing, cut short or not minipipe's; the message names it."""


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:06d}")


def save(
    root: str,
    step: int,
    rank: int,
    named_params: dict,
    optimizer,
    meta: dict,
    before_finish=None,
    writer: bool = True,
    tp: tuple[int, int] = (0, 1),
    spec: dict | None = None,
) -> None:
    """Collective: every rank calls it after `step` steps are done; the `writer`s write. `tp` is
    (this rank's tp index, tp size) and `spec` which of its parameters are slices (name -> Shard)."""
    tmp = step_dir(root, step) + ".tmp"
    if rank == 0:
        with _writing(root, step):
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
    dist.barrier()
    if writer:
        state = {
            "step": step,
            "params": {name: p.detach().cpu() for name, p in named_params.items()},
            "optimizer": _optimizer_state_by_name(named_params, optimizer),
            "rng": torch.get_rng_state(),
            "tp": list(tp),
            "shards": {name: [sh.dim, sh.parts] for name, sh in (spec or {}).items()},
            manifest.RUN: meta.get(manifest.RUN),
        }
        file = os.path.join(tmp, f"rank{rank}.pt")
        with _writing(root, step):
            _atomic_save(state, file)
            written = (os.path.basename(file), manifest.entry(file))
    if before_finish is not None:
        before_finish()
    entries = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(written if writer else None, entries, dst=0)  # every rank has written by now
    if rank == 0:
        files = dict(e for e in entries if e is not None)
        with _writing(root, step):
            with open(os.path.join(tmp, "meta.json"), "w") as f:
                json.dump({**meta, "step": step, manifest.FILES: files}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            final = step_dir(root, step)
            if os.path.exists(final):  # a damaged step the run resumed before: kept aside, not deleted
                os.replace(final, _free_name(final + ".damaged"))
            os.replace(tmp, final)
            _atomic_write(os.path.join(root, LATEST), os.path.basename(final))
    dist.barrier()


@contextlib.contextmanager
def _writing(root: str, step: int):
    """Say in words why a checkpoint could not be written, and what is still intact."""
    try:
        yield
    except OSError as e:
        why = {
            errno.ENOSPC: "the disk is full: free space on it, or choose a checkpoint_dir on another disk",
            errno.EDQUOT: "the disk quota is used up: free space, or choose a checkpoint_dir on another disk",
            errno.EROFS: "the disk is read-only: choose a checkpoint_dir on a writable one",
            errno.EACCES: "this user may not write there: choose a checkpoint_dir it may write to",
        }.get(e.errno, "check the disk and the folder, or choose another checkpoint_dir")
        intact, _ = newest(root)
        kept = (
            f"the newest complete checkpoint, {os.path.basename(intact)}, is untouched"
            if intact
            else "no earlier checkpoint exists in it"
        )
        raise CheckpointError(
            f"saving the checkpoint of step {step} in {root} failed: "
            f"{(e.strerror or str(e)).lower()} ({e.filename or 'a checkpoint file'}); {why}; "
            f"{kept}"
        ) from None


def _free_name(path: str) -> str:
    """`path`, or `path.1`, `path.2`, ... : the first that does not exist."""
    n, name = 0, path
    while os.path.exists(name):
        n += 1
        name = f"{path}.{n}"
    return name


def steps(root: str) -> list[str]:
    """The complete-looking step folders in `root`, newest first (intact or not)."""
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [n for n in names if STEP_NAME.fullmatch(n) and os.path.isdir(os.path.join(root, n))]
    return [os.path.join(root, n) for n in sorted(found, key=lambda n: int(STEP_NAME.fullmatch(n)[1]), reverse=True)]


def damage(path: str) -> str | None:
    """What is wrong with a step folder (its meta.json, its rank files, what its manifest records),
    or None when it reads whole and every file belongs to it."""
    try:
        meta = read_meta(path)
        files = rank_files(path, meta)
        listed = manifest.listed_problem(path, meta, files)
        if listed:
            return listed
        for file in files:
            state = read_rank_file(file, mmap=True)  # mmap: reads the names, not the tensors
            wrong = manifest.problem(file, state, meta)
            if wrong:
                return wrong
    except CheckpointError as e:
        return str(e)
    return None


def newest(root: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest intact checkpoint folder in `root` (None if there is none), and the newer ones
    skipped on the way as (folder, what is wrong with it)."""
    skipped = []
    for path in steps(root):
        problem = damage(path)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def latest(root: str) -> str | None:
    """The folder the `latest` pointer names, if it has its meta.json, or None (resuming reads
    `newest`, which does not trust the pointer)."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(root, name)
    return path if os.path.exists(os.path.join(path, "meta.json")) else None


def read_meta(path: str) -> dict:
    file = os.path.join(path, "meta.json")
    try:
        with open(file) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(
            f"{file} is missing, so {path} is not a complete checkpoint; "
            f"resume from another one or start a fresh checkpoint_dir"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{file} is not the JSON minipipe writes ({e}); the file is damaged: "
            f"resume from another checkpoint or start a fresh checkpoint_dir"
        ) from None
    if not isinstance(meta, dict) or not {"param_shapes", "step"} <= set(meta):
        raise CheckpointError(
            f"{file} lacks the run's description (param_shapes, step): it was not written by "
            f"minipipe; resume from a checkpoint minipipe saved or start a fresh checkpoint_dir"
        )
    return meta


def rank_files(path: str, meta: dict) -> list[str]:
    """One file per writing rank of the run that saved the checkpoint (older folders lack meta's
    "writers" and "p")."""
    if "writers" in meta:
        return [os.path.join(path, f"rank{r}.pt") for r in meta["writers"]]
    if "p" in meta:
        return [os.path.join(path, f"rank{r}.pt") for r in range(meta["p"])]
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".pt"))


def read_rank_file(file: str, mmap: bool = False) -> dict:
    """One rank's saved state, as data only (see the module docstring), or CheckpointError."""
    redo = "resume from another checkpoint or start a fresh checkpoint_dir"
    if not os.path.exists(file):
        raise CheckpointError(
            f"{file} is missing: every rank of the run that saved the checkpoint writes one "
            f"file, so this one is incomplete; {redo}"
        )
    if not zipfile.is_zipfile(file):
        raise CheckpointError(
            f"{file} is not a checkpoint file: torch.save writes a zip archive, and this one is "
            f"cut short, damaged or of another kind ({os.path.getsize(file)} bytes); {redo}"
        )
    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{file} holds Python objects other than tensors, numbers and containers "
            f"({str(e).strip().splitlines()[-1][:200]}); minipipe loads checkpoints as data "
            f"only, since loading such objects can run any code. It was not loaded: "
            f"use a checkpoint minipipe saved, or {redo}"
        ) from None
    except (RuntimeError, EOFError, OSError) as e:
        raise CheckpointError(
            f"{file} cannot be read ({str(e).strip().splitlines()[0][:200]}): it is cut short or damaged; {redo}"
        ) from None
    if not isinstance(state, dict) or not set(KEYS) <= set(state):
        raise CheckpointError(
            f"{file} is a torch file but not a minipipe rank file (it lacks {', '.join(KEYS)}); {redo}"
        )
    return state


def check_matches(path: str, param_shapes: dict) -> dict:
    """Raise ValueError unless the checkpoint holds exactly these parameters, shaped so, in
    rank files that read as data."""
    meta = read_meta(path)
    saved = {k: tuple(v) for k, v in meta["param_shapes"].items()}
    if saved != param_shapes:
        missing = sorted(set(param_shapes) - set(saved))[:3]
        extra = sorted(set(saved) - set(param_shapes))[:3]
        changed = sorted(k for k in set(saved) & set(param_shapes) if saved[k] != param_shapes[k])[:3]
        raise ValueError(
            f"the checkpoint in {path} does not match this model ({meta.get('model')} {meta.get('model_args')}): "
            + "; ".join(
                x
                for x in (
                    missing and f"missing {missing}",
                    extra and f"unexpected {extra}",
                    changed and f"other shapes for {changed}",
                )
                if x
            )
            + ". Resume with the model settings it was saved with, or start a fresh checkpoint_dir."
        )
    stored = set()
    for file in rank_files(path, meta):
        stored |= set(read_rank_file(file, mmap=True)["params"])  # mmap: reads the names, not the tensors
    if stored != set(saved):
        raise CheckpointError(
            f"the rank files in {path} lack parameters its meta.json lists "
            f"({sorted(set(saved) - stored)[:3]}): the checkpoint is incomplete; resume "
            f"from another one or start a fresh checkpoint_dir"
        )
    return meta


def load(path: str, named_params: dict, optimizer, tp: tuple[int, int] = (0, 1), spec: dict | None = None) -> int:
    """Load this rank's parameters and their optimizer state; returns the step to continue from.
    `tp` and `spec` as for save: the slices saved are put together, then cut for this rank."""
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    opt_pieces: dict[str, dict[int, dict]] = {}
    split: dict[str, Shard] = {}
    step = None
    meta = read_meta(path)
    for file in rank_files(path, meta):
        state = read_rank_file(file)
        wrong = manifest.problem(file, state, {k: meta[k] for k in ("step", manifest.RUN) if k in meta})
        if wrong:  # the folder changed after the run was planned: never train on a mixture
            raise CheckpointError(wrong)
        index = state.get("tp", [0, 1])[0]
        for name, t in state["params"].items():
            pieces.setdefault(name, {})[index] = t
        for name, st in state["optimizer"].items():
            opt_pieces.setdefault(name, {})[index] = st
        split.update({name: Shard(*dim_parts) for name, dim_parts in state.get("shards", {}).items()})
        step = state["step"]
    mine, size = tp
    spec = spec or {}

    def whole(name: str, by_rank: dict[int, torch.Tensor]) -> torch.Tensor:
        return unshard([by_rank[r] for r in sorted(by_rank)], split[name]) if name in split else by_rank[min(by_rank)]

    def cut(name: str, full: torch.Tensor) -> torch.Tensor:
        return shard(full, spec[name], mine, size) if name in spec else full

    with torch.no_grad():
        for name, p in named_params.items():
            p.copy_(cut(name, whole(name, pieces[name])))
            if name in opt_pieces:
                saved = opt_pieces[name]
                first = saved[min(saved)]
                like = pieces[name][min(pieces[name])].shape  # a state tensor shaped like the slice is sliced too
                optimizer.state[p] = {
                    k: (
                        cut(name, whole(name, {r: saved[r][k] for r in saved})).to(p.device)
                        if torch.is_tensor(v) and v.shape == like
                        else v.to(p.device)
                        if torch.is_tensor(v)
                        else v
                    )
                    for k, v in first.items()
                }
    return step


def _optimizer_state_by_name(named_params: dict, optimizer) -> dict:
    return {
        name: {k: (v.detach().cpu().clone() if torch.is_tensor(v) else v) for k, v in optimizer.state[p].items()}
        for name, p in named_params.items()
        if p in optimizer.state
    }


def _atomic_save(obj, path: str) -> None:
    # through a Python file, so that a failed write raises OSError with its cause (torch's own
    # writer, given a path, reports a full disk as "unexpected pos")
    with open(path + ".part", "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".part", path)


def _atomic_write(path: str, text: str) -> None:
    with open(path + ".part", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".part", path)
