"""Checkpoints that survive being killed, and that any schedule can resume from.

Layout under the checkpoint folder:

    latest              the name of the newest complete checkpoint ("step-000010")
    step-000010/        one file per rank, plus meta.json
    step-000020.tmp/    a checkpoint being written (or one a kill interrupted: ignored)

Each rank writes its file under a temporary name and renames it; rank 0 renames the folder
and then `latest` once every rank has written. A kill at any moment leaves `latest` pointing
at a complete checkpoint.

Parameters and optimizer state are stored by their name in the whole model (`"3.linear.weight"`),
not by stage, so a run may resume with another schedule — even another p — and every rank
picks out the layers it now owns. The data position is the step: batches are a pure function
of (seed, step).
"""
from __future__ import annotations

import json
import os
import shutil

import torch
import torch.distributed as dist

LATEST = "latest"


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:06d}")


def save(root: str, step: int, rank: int, named_params: dict, optimizer, meta: dict, before_finish=None) -> None:
    """Collective: every rank calls it after `step` steps are done."""
    tmp = step_dir(root, step) + ".tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    dist.barrier()
    state = {"step": step,
             "params": {name: p.detach().cpu() for name, p in named_params.items()},
             "optimizer": _optimizer_state_by_name(named_params, optimizer),
             "rng": torch.get_rng_state()}
    _atomic_save(state, os.path.join(tmp, f"rank{rank}.pt"))
    if before_finish is not None:
        before_finish()
    dist.barrier()
    if rank == 0:
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({**meta, "step": step}, f, indent=1)
        final = step_dir(root, step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _atomic_write(os.path.join(root, LATEST), os.path.basename(final))
    dist.barrier()


def latest(root: str) -> str | None:
    """The newest complete checkpoint folder, or None."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(root, name)
    return path if os.path.exists(os.path.join(path, "meta.json")) else None


def read_meta(path: str) -> dict:
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)


def check_matches(path: str, param_shapes: dict) -> dict:
    """Raise ValueError unless the checkpoint holds exactly these parameters, shaped so."""
    meta = read_meta(path)
    saved = {k: tuple(v) for k, v in meta["param_shapes"].items()}
    if saved != param_shapes:
        missing = sorted(set(param_shapes) - set(saved))[:3]
        extra = sorted(set(saved) - set(param_shapes))[:3]
        changed = sorted(k for k in set(saved) & set(param_shapes) if saved[k] != param_shapes[k])[:3]
        raise ValueError(
            f"the checkpoint in {path} does not match this model ({meta.get('model')} {meta.get('model_args')}): "
            + "; ".join(x for x in (missing and f"missing {missing}", extra and f"unexpected {extra}",
                                    changed and f"other shapes for {changed}") if x)
            + ". Resume with the model settings it was saved with, or start a fresh checkpoint_dir.")
    return meta


def load(path: str, named_params: dict, optimizer) -> int:
    """Load this rank's parameters and their optimizer state; returns the step to continue from."""
    params, opt_state, step = {}, {}, None
    for name in sorted(os.listdir(path)):
        if name.endswith(".pt"):
            state = torch.load(os.path.join(path, name), weights_only=False)
            params.update(state["params"])
            opt_state.update(state["optimizer"])
            step = state["step"]
    with torch.no_grad():
        for name, p in named_params.items():
            p.copy_(params[name])
            if name in opt_state:
                optimizer.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) else v) for k, v in opt_state[name].items()}
    return step


def _optimizer_state_by_name(named_params: dict, optimizer) -> dict:
    return {name: {k: (v.detach().cpu().clone() if torch.is_tensor(v) else v) for k, v in optimizer.state[p].items()}
            for name, p in named_params.items() if p in optimizer.state}


def _atomic_save(obj, path: str) -> None:
    torch.save(obj, path + ".part")
    os.replace(path + ".part", path)


def _atomic_write(path: str, text: str) -> None:
    with open(path + ".part", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".part", path)
