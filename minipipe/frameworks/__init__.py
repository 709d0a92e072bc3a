"""The systems the course points to, run beside minipipe on the same model and schedule.

    deepspeed.py      DeepSpeed's pipeline instruction streams read into minipipe's IR; its
                      PipelineModule trained on gloo
    megatron.py       Megatron-Core's pipeline loops, recorded for (p, m, v), and trained on gloo
                      through them with Megatron-LM's exchange (dp > 1 too)
    megatron_loop.py  one rank's Megatron-Core loop on the CPU: its communicator recorded
    fsdp.py           torch's FSDP2 (`fully_shard`) on gloo: losses, memory by kind, collective
                      bytes against the formula, and FSDP inside each pipeline stage
    jax.py            a GPipe in JAX (`shard_map`, `ppermute`) on host devices
    torch_runtime.py  minipipe's schedules as the CSV torch's `_PipelineScheduleRuntime` (and so
                      torchtitan) loads, run by torch's runtime on gloo
    torchtitan.py     the whole torchtitan command that trains a schedule from its CSV
    knobs.py          each framework's knobs in the course's words

Each module imports its framework inside its functions, so minipipe imports without any of them;
`missing(name)` says why one cannot run here (install `minipipe[frameworks]`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

# The import name of each framework, and the distribution pip installs it from.
PACKAGES = {"deepspeed": "deepspeed", "megatron": "megatron-core", "jax": "jax", "torch": "torch"}
MODULES = {"deepspeed": "deepspeed", "megatron": "megatron.core", "jax": "jax", "torch": "torch"}


def version(name: str) -> str | None:
    """The installed version of framework `name` (a key of PACKAGES), or None if it is absent."""
    if name not in PACKAGES:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(PACKAGES)}")
    try:
        found = importlib.util.find_spec(MODULES[name]) is not None
    except ModuleNotFoundError:  # megatron present but not megatron.core
        found = False
    if not found:
        return None
    try:
        return importlib.metadata.version(PACKAGES[name])
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def missing(name: str) -> str | None:
    """Why framework `name` cannot run here (for a lesson's skip), or None when it can."""
    if version(name) is None:
        return (
            f"{PACKAGES[name]} is not installed: pip install '{PACKAGES[name]}' "
            f"(or minipipe's extra: pip install -e '.[frameworks]')"
        )
    return None
