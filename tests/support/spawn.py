"""Run a function on a few fresh processes joined in a gloo group, for tests.

    results = run_ranks(fn, world=2, timeout=120)   # [fn(0, 2), fn(1, 2)]

`fn` must be importable by name (a module-level function of an importable module, e.g. a test
file's), since the processes are spawned. The processes find each other through a
TCPStore this process serves on a free port. A rank that raises makes run_ranks raise with every
rank's traceback; a rank that dies or outlives `timeout` makes it raise too; either way no process
is left running. Independent of minipipe's own launcher, so it tests what that launcher does not.
"""

from __future__ import annotations

import pickle
import queue
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run_ranks(fn, world: int, *args, timeout: float = 120.0) -> list:
    ctx = mp.get_context("spawn")
    results_q = ctx.Queue()
    store = dist.TCPStore(
        "127.0.0.1", 0, world, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout)
    )
    procs = [
        ctx.Process(target=_entry, args=(fn, rank, world, store.port, timeout, args, results_q), daemon=True)
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    results, ok = {}, False
    try:
        deadline = time.monotonic() + timeout
        while len(results) < world:
            try:
                status, rank, payload = results_q.get(timeout=0.5)
            except queue.Empty:  # a bare get() would wait forever for a rank that died
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    raise AssertionError(
                        f"rank {dead[0][0]} died with exit code {dead[0][1]} without reporting"
                    ) from None
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"ranks {sorted(set(range(world)) - set(results))} did not finish within {timeout} s"
                    ) from None
                continue
            if status == "error":
                raise AssertionError(_failures(results_q, {rank: payload}))
            results[rank] = pickle.loads(payload)
        ok = True
        return [results[rank] for rank in range(world)]
    finally:
        for proc in procs:
            proc.join(timeout=10 if ok else 0.1)
            if proc.is_alive():
                proc.kill()
                proc.join()
        results_q.close()
        results_q.join_thread()


def _failures(results_q, errors: dict[int, str], grace: float = 2.0) -> str:
    """One rank's failure often makes its peers fail too (connection closed): gather what else
    arrives for a moment so the report shows every rank's traceback, first failure first."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            status, rank, payload = results_q.get(timeout=0.1)
        except queue.Empty:
            continue
        if status == "error":
            errors.setdefault(rank, payload)
    return "\n".join(f"rank {rank} failed:\n{tb}" for rank, tb in errors.items())


def _entry(fn, rank, world, port, timeout, args, results_q):
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=timeout))
        # A finite timeout turns a wait on a dead or diverged peer into an error, not a hang.
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=min(timeout, 60))
        )
        # Plain pickle: tensors travel as bytes, not as shared memory that dies with this process.
        results_q.put(("ok", rank, pickle.dumps(fn(rank, world, *args))))
    except BaseException:
        results_q.put(("error", rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
