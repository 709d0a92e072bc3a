"""Where each rank of this machine runs: which device, which backend, which core.

`place` picks the device and backend for a run (one GPU per rank with NCCL, GPUs shared over gloo,
or the CPU); `pin_to_core` gives a rank the core its run claimed (cores.py: never another run's);
`keep_freed_memory` tunes malloc for the same buffers every step. The launcher (workers.py) applies
them in each worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Placement:
    device: str  # "cpu" | "cuda"
    backend: str  # "gloo" | "nccl"
    gpus: tuple[int, ...]  # local rank r on CUDA device gpus[r]; () on the CPU
    via_host: bool  # messages are copied through host memory (gloo between GPUs)
    note: str | None  # to tell the user once, when the run starts

    @property
    def label(self) -> str:
        """Where the ranks ran, in a few words, for the title of a measured timing."""
        if self.device == "cpu":
            return "on the CPU (gloo)"
        gpus = len(set(self.gpus))
        if gpus < len(self.gpus):
            return f"{len(self.gpus)} ranks sharing {gpus} GPU{'s' if gpus > 1 else ''} (gloo, via host memory)"
        return f"one GPU per rank ({self.backend}{', via host memory' if self.via_host else ''})"


def place(ranks: int, visible_gpus: int, device: str = "auto", backend: str = "auto") -> Placement:
    """Which device each of this machine's `ranks` runs on, and how they talk.

    One GPU per rank with NCCL when there are enough GPUs (device auto or cuda). With fewer GPUs
    than ranks, the ranks share them round robin and exchange tensors through host memory over
    gloo (NCCL refuses two ranks on one GPU), and the note says so: a workshop participant given
    one GPU runs every lesson on it. The CPU when no GPU is visible, when asked (device="cpu"),
    or with device="auto" and backend="gloo"."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu or cuda")
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; choose auto, gloo or nccl")
    gpu_word = f"{visible_gpus} GPU{'s' if visible_gpus != 1 else ''}"
    if device == "auto":
        device = "cuda" if backend != "gloo" and visible_gpus > 0 else "cpu"
    if device == "cpu":
        if backend == "nccl":
            raise ValueError("backend='nccl' needs GPUs (device='cuda'); on CPU use backend='gloo'")
        return Placement("cpu", "gloo", (), False, None)
    if visible_gpus < 1:
        raise ValueError("device='cuda' but no GPU is visible to torch; use device='cpu' (or 'auto')")
    if visible_gpus >= ranks:
        backend = "nccl" if backend == "auto" else backend
        via_host = backend == "gloo"
        note = (
            (
                f"backend='gloo' on GPUs: the {ranks} ranks exchange tensors through host memory; "
                f"NCCL (backend='auto') sends them GPU to GPU"
            )
            if via_host
            else None
        )
        return Placement("cuda", backend, tuple(range(ranks)), via_host, note)
    if backend == "nccl":
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: {ranks} ranks on this machine but {gpu_word} "
            f"visible; use backend='auto' to share the GPUs over gloo, or at most {visible_gpus} ranks"
        )
    gpus = tuple(r % visible_gpus for r in range(ranks))
    where = "; ".join(
        f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} on cuda:{g}"
        for g in range(visible_gpus)
        for rs in [[r for r in range(ranks) if gpus[r] == g]]
    )
    return Placement(
        "cuda",
        "gloo",
        gpus,
        True,
        f"{ranks} ranks share {gpu_word} ({where}): they exchange tensors through host memory "
        f"over gloo, slower than NCCL with one GPU per rank",
    )


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pin_to_core(core: int) -> None:
    """Give a rank a core of its own: otherwise one rank's communication threads compete with
    another rank's compute, and every step pays for it. Applies to every thread of the process
    (gloo's too), and to threads started later. The core comes from the run's claim
    (cores.claim_cores), so it is inside what this process was given and no other run's."""
    set_cores({core})


def set_cores(cores: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cores)


def keep_freed_memory() -> None:
    """Every step allocates and frees the same activation and gradient buffers. By default
    glibc returns large blocks to the kernel, and the next step pays a page fault per 4 KiB to
    get them back (~1,000 a step on the course's MLP); keeping them costs nothing here."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 * 2**20)
    libc.mallopt(m_trim_threshold, 2**30)
