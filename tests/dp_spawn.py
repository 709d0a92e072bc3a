"""Run a function on a few gloo processes for a test, and get each rank's result back.

    results = spawn_ranks(fn, world=2, timeout=120)   # {rank: fn(rank, world)}

fn must be importable by name (a module-level function of a module on sys.path: spawned
children cannot unpickle a function defined in __main__ or a notebook). Processes come from the
spawn context; they meet at a free localhost port. A rank that raises makes this raise with every
rank's traceback; a rank that dies or a run past `timeout` raises too; no process outlives the call.
"""
from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from datetime import timedelta

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(fn, world: int, timeout: float, pg_timeout: float = 60.0) -> dict[int, object]:
    ctx = mp.get_context("spawn")
    results_q = ctx.Queue()   # from the spawn context: a fork-context queue cannot reach spawn children
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, rank, world, port, pg_timeout, results_q), daemon=True)
             for rank in range(world)]
    for proc in procs:
        proc.start()
    results, errors, ok = {}, {}, False
    try:
        deadline = time.monotonic() + timeout
        while len(results) + len(errors) < world:
            try:
                status, rank, payload = results_q.get(timeout=0.5)
            except queue.Empty:   # a bare get() would wait forever for a rank that died
                dead = [(r, p.exitcode) for r, p in enumerate(procs)
                        if p.exitcode not in (None, 0) and r not in results and r not in errors]
                if dead and not errors:
                    raise AssertionError(f"rank {dead[0][0]} died with exit code {dead[0][1]} without reporting")
                if errors and (dead or time.monotonic() > min(deadline, first_error + 5)):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"ranks {sorted(set(range(world)) - set(results))} did not finish "
                                         f"within {timeout} s") from None
                continue
            if status == "error":
                if not errors:
                    first_error = time.monotonic()
                errors[rank] = payload
            else:
                results[rank] = payload
        if errors:   # one rank's failure often fails its peers (connection closed): show them all
            raise AssertionError("\n".join(f"rank {r} failed:\n{tb}" for r, tb in sorted(errors.items())))
        ok = True
        return results
    finally:
        for proc in procs:
            proc.join(timeout=10 if ok else 0.1)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _entry(fn, rank: int, world: int, port: int, pg_timeout: float, results_q) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=pg_timeout))
        result = fn(rank, world)
        results_q.put(("ok", rank, result))
        dist.destroy_process_group()
    except BaseException:
        results_q.put(("error", rank, traceback.format_exc()))
