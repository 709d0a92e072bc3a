"""How close does PyTorch's own pipelining come to the textbook ideal on this machine?

Two ranks (gloo, one thread each) run torch's GPipe, 1F1B and Interleaved1F1B on the MLP task
(16 x Linear(512) + readout, batch 64) cut into uniform stages, next to the one-process
reference (the same m micro-batches one after another, forward + backward). Ideal step time =
ref / p * (m + p - 1) / m. Each configuration runs with each rank pinned to its own core and
unpinned; all of them alternate round by round in the same run, so a noisy neighbour hits
every column alike.

    python benchmarks/torch_pp_probe.py [--rounds 7] [--steps 5] [--malloc-tune] [--gloo-idle]

About a minute on 2 cores. The machine may be shared: each cell's rounds are kept only when
other processes used < 0.1 core meanwhile (read from /proc/stat), and the table says how many.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from minipipe.bench.torch_pp import TorchPipeline
from minipipe.models import make_task

P = 2
CONFIGS = [("gpipe", 1, 4), ("gpipe", 1, 8), ("1f1b", 1, 4), ("1f1b", 1, 8), ("interleaved", 2, 8)]


def uniform_bounds(n_layers: int, n_stages: int) -> list[int]:
    """As even as layer counts allow; the first (n mod stages) stages take one layer more."""
    size, extra = divmod(n_layers, n_stages)
    bounds = [0]
    for s in range(n_stages):
        bounds.append(bounds[-1] + size + (s < extra))
    return bounds


def set_affinity(cpus: set[int]) -> None:
    """Move every thread of this process (gloo's network threads too, which already exist) onto
    `cpus`. os.sched_setaffinity(0, ...) alone would move only the calling thread."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:      # a thread that ended meanwhile
            pass


def set_helper_threads_idle(idle: bool) -> None:
    """SCHED_IDLE for every thread but the compute thread: gloo's network thread then runs only
    when the core is otherwise free, instead of preempting the matmuls it is waiting for."""
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    for tid in map(int, os.listdir("/proc/self/task")):
        if tid != threading.get_native_id():
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            except (ProcessLookupError, PermissionError):
                pass


def reference_step(layers: list[nn.Module], task, x, y, m: int) -> None:
    """The one-process baseline: the same m micro-batches one after another, loss / m each."""
    for layer in layers:
        layer.zero_grad(set_to_none=True)
    model = nn.Sequential(*layers)
    for xs, ys in zip(x.chunk(m), y.chunk(m)):
        (task.loss(model(xs), ys) / m).backward()


def busy_ticks() -> int:
    """CPU time (1/100 s) that every process on the machine has used so far."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, open("/proc/stat").readline().split()[1:9])
    return user + nice + system + irq + softirq + steal


def own_ticks() -> int:
    """CPU time (1/100 s) this process, all its threads, has used so far."""
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])      # utime, stime


def worker(rank: int, init: str, rounds: int, steps: int, gloo_idle: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=P,
                            timeout=timedelta(seconds=120))
    task = make_task("mlp", width=512, depth=16, batch_size=64)
    x, y = task.batch(0)
    all_cpus = os.sched_getaffinity(0)
    variants = {"free": lambda: set_affinity(all_cpus),
                "pinned": lambda: set_affinity({sorted(all_cpus)[rank % len(all_cpus)]})}
    if gloo_idle:
        variants["pinned+idle"] = variants["pinned"]

    # What one step of each cell is on this rank. The reference runs on rank 0 alone; rank 1
    # sleeps in the next barrier meanwhile.
    runs = {}
    for kind, v, m in CONFIGS:
        n_stages = P * v
        bounds = uniform_bounds(task.n_layers, n_stages)
        layers = task.layers()
        mine = {s: nn.Sequential(*layers[bounds[s]:bounds[s + 1]]) for s in range(rank, n_stages, P)}
        pipe = TorchPipeline(kind, mine, n_stages, m, task.loss)
        for _ in range(3):      # warm-up; the first step also infers shapes (collectively)
            pipe.step(x, y)
        runs[(kind, v, m)] = partial(pipe.step, x, y)
    ref_layers = task.layers()
    for m in sorted({m for _, _, m in CONFIGS}):
        runs[("ref", 1, m)] = partial(reference_step, ref_layers, task, x, y, m) if rank == 0 else (lambda: None)

    # times[(cell, variant)] = [(t0, t1), ...] per step; cells[...] = [(own, busy, wall), ...] per
    # round, to tell afterwards in which rounds other processes shared the CPUs with us.
    # perf_counter is CLOCK_MONOTONIC: one clock for all processes on the machine.
    times: dict[tuple, list] = {}
    cells: dict[tuple, list] = {}
    for _ in range(rounds):
        for variant, apply in variants.items():
            apply()
            set_helper_threads_idle(variant.endswith("idle"))
            for key, run in runs.items():
                dist.barrier()
                own, busy, wall = own_ticks(), busy_ticks(), time.perf_counter()
                for _ in range(steps):
                    dist.barrier()
                    t0 = time.perf_counter()
                    run()
                    times.setdefault((key, variant), []).append((t0, time.perf_counter()))
                dist.barrier()
                cells.setdefault((key, variant), []).append(
                    (own_ticks() - own, busy_ticks() - busy, time.perf_counter() - wall))
    set_helper_threads_idle(False)

    gathered = [None] * P
    dist.all_gather_object(gathered, (times, cells))
    if rank == 0:
        report(gathered, list(variants), task, rounds, steps)
    dist.destroy_process_group()


def report(per_rank: list, variants: list[str], task, rounds: int, steps: int,
           max_foreign: float = 0.1) -> None:
    """Median step time per cell over the rounds in which other processes used less than
    `max_foreign` of a core (all rounds, marked *, when none was that quiet)."""
    foreign_all = []

    def median_ms(key):
        # A step runs from rank 0's start (stage 0 starts the work) to the last rank's end.
        starts = [t0 for t0, _ in per_rank[0][0][key]]
        ends = [max(ts) for ts in zip(*[[t1 for _, t1 in times[key]] for times, _ in per_rank])]
        # Cores that other processes kept busy during each round of this cell.
        foreign = []
        for i, (_, busy, wall) in enumerate(per_rank[0][1][key]):
            ours = sum(cells[key][i][0] for _, cells in per_rank)
            foreign.append(max(0.0, (busy - ours) / 100 / wall))   # ticks are coarse: clip at 0
        foreign_all.extend(foreign)
        quiet = [i for i, f in enumerate(foreign) if f < max_foreign]
        steps_used = [i * steps + k for i in (quiet or range(rounds)) for k in range(steps)]
        return statistics.median(1e3 * (ends[j] - starts[j]) for j in steps_used), len(quiet)

    print(f"{task.describe()}; p={P}, gloo, 1 thread per rank; {rounds} rounds x {steps} steps per cell")
    print("stages: " + "; ".join(f"{P * v} stages {uniform_bounds(task.n_layers, P * v)}"
                                 for v in sorted({v for _, v, _ in CONFIGS})))
    print(f"ms = median step time over the rounds in which other processes used < {max_foreign} "
          f"core (q = how many of {rounds}; * = none, all rounds used)")
    print(f"{'schedule':<20}" + "".join(f"{variant + ' ms':>16}{'q':>3}{'ideal':>7}{'ideal/ms':>9}"
                                        for variant in variants))
    for m in sorted({m for _, _, m in CONFIGS}):
        row = f"{'ref (1 proc) m=' + str(m):<20}"
        for var in variants:
            ms, q = median_ms((("ref", 1, m), var))
            row += f"{ms:15.1f}{'*' if not q else ' '}{q:3d}{'':16}"
        print(row)
    for kind, v, m in CONFIGS:
        row = f"{kind + f' m={m}' + (f' v={v}' if v > 1 else ''):<20}"
        for var in variants:
            ms, q = median_ms(((kind, v, m), var))
            # Each variant's ideal comes from the reference run under the same setting.
            ideal = median_ms((("ref", 1, m), var))[0] / P * (m + P - 1) / m
            row += f"{ms:15.1f}{'*' if not q else ' '}{q:3d}{ideal:7.1f}{ideal / ms:9.2f}"
        print(row)
    print(f"other processes kept {statistics.median(foreign_all):.2f} cores busy (median over "
          f"cells and rounds); load average at the end: {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per cell and round")
    parser.add_argument("--malloc-tune", action="store_true",
                        help="MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ up: fewer page faults")
    parser.add_argument("--gloo-idle", action="store_true",
                        help="add a variant: pinned, with gloo's threads at SCHED_IDLE")
    args = parser.parse_args()
    if args.malloc_tune:    # read by glibc at process start: set before the workers spawn
        os.environ.update(MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824")
    with tempfile.TemporaryDirectory() as tmp:
        # mp.spawn re-raises a worker's exception with its traceback and stops the other rank.
        mp.spawn(worker, args=(f"file://{tmp}/store", args.rounds, args.steps, args.gloo_idle),
                 nprocs=P)


if __name__ == "__main__":
    main()
