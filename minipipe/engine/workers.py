"""Worker processes on this machine: where they run, starting them, watching them, explaining
their failures.

    results = launch(jobs, world, body, progress)   # {(job index, rank): what body returned}

One group of `world` processes runs every job in turn: rank r calls `body(job.work, r, report,
status)` and its return value comes back to the caller. Starting a group costs seconds (each
process imports torch and joins the process group), so a caller puts several jobs in one group.

The processes come from a fork server that imported torch once; each is pinned to a core of its
own when asked — a core of this process's affinity that no other run on the machine has claimed
(cores.py), or none, said once — and malloc keeps freed memory. The caller hosts the rendezvous store on a free
port, and watches: a worker that raises, dies or stops moving stops the whole group, and
`launch` raises WorkerError naming the rank, the step and the action it was on (diagnosis.py
decides whom to blame from the reports and exit codes). No process
outlives the call, and the workers leave if the caller dies.

Two timeouts. Start-up (rendezvous, joining the process group, whatever the body builds before
its first step) may take `Job.startup_timeout`; inside a step, a wait on a peer may take
`Job.timeout`. The process group's own timeout, which torch's barriers and blocking sends use,
is longer than both and than the watchdog's, so that minipipe's own errors, which name the
action, always come first.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .cores import Claim, claim_cores
from .diagnosis import REPORTED, STATES, Seen, WorkerError, action_at, blame, stalled, status_of
from .placement import keep_freed_memory, pin_to_core

GRACE = 5.0  # seconds of silence the watchdog allows beyond a timeout before it stops the run
SETTLE = 2.0  # seconds a failure's reports and exit codes may take to arrive before blame is final


@dataclass(frozen=True)
class Job:
    """One job for the group: what every rank's body gets (`work`), and what the machinery needs.
    Jobs run in one group of processes, so they must agree on backend, gpus and pin_cores."""

    work: Any
    backend: str = "gloo"  # the process group's: gloo | nccl
    gpus: tuple[int, ...] = ()  # rank r runs on CUDA device gpus[r]; () runs on the CPU
    pin_cores: bool = False  # each rank on a free core of its own (cores.py), when there are enough
    timeout: float = 60.0  # seconds a wait on a peer may take, inside a step
    startup_timeout: float = 300.0  # seconds to start: rendezvous, process group, building
    schedule: Any = None  # a Schedule, to name the action a rank was on (None: no actions)
    mesh: Any = None  # a Mesh: global rank -> (pp, dp, tp), to say where a rank sits


def group_timeout(timeout: float, startup_timeout: float) -> float:
    """The process group's own timeout: longer than any wait minipipe bounds itself and than the
    watchdog's patience, so that minipipe's errors (which name the action) come first."""
    return max(timeout, startup_timeout) + 2 * GRACE


# -- the caller's side ------------------------------------------------------------------------
def tell(note: str | None, progress=None) -> None:
    """Say a note once: to the caller's progress function (the CLI prints it), else as a
    warning (a notebook shows it once)."""
    if note is None:
        return
    if progress is not None:
        progress({"kind": "note", "text": note})
    else:
        warnings.warn(note, stacklevel=4)


def launch(jobs: list[Job], world: int, body: Callable, progress: Callable[[dict], None] | None = None) -> dict:
    """Run `body(job.work, rank, report, status)` for every job, in order, on `world` processes;
    returns {(job index, rank): what body returned}. See the module docstring."""
    first = jobs[0]
    if any((j.backend, j.gpus, j.pin_cores) != (first.backend, first.gpus, first.pin_cores) for j in jobs):
        raise ValueError(
            "jobs in one group of processes need the same backend, gpus and pin_cores; launch them separately"
        )
    if first.gpus and len(first.gpus) != world:
        raise ValueError(f"gpus names a device for {len(first.gpus)} ranks, but the group has {world}")
    ctx = _context()
    timeout, startup = max(j.timeout for j in jobs), max(j.startup_timeout for j in jobs)
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        None,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=group_timeout(timeout, startup)),
    )
    messages = ctx.Queue()
    status = ctx.Array("d", [0, 0, -1, 0] * world, lock=False)  # per rank: job, step, action index, state
    claim = claim_cores(world) if first.pin_cores else Claim(())
    tell(claim.note, progress)
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world, store.port, jobs, body, messages, status, claim.cores),
            name=f"minipipe-rank{r}",
            daemon=True,
        )
        for r in range(world)
    ]
    results: dict = {}
    try:
        with _main_module_hidden(), _ctrl_c_for_the_caller_only():
            for p in procs:
                p.start()
        if progress is not None:
            progress({"kind": "started", "pids": [p.pid for p in procs]})
        last_change, last_status = time.monotonic(), list(status)
        reports: list[dict] = []
        failing_since = None  # when the first sign of a failure came: a report or a death
        while len(results) < len(jobs) * world:
            try:
                kind, job, rank, data = messages.get(timeout=0.1 if failing_since is None else 0.02)
            except queue_module.Empty:
                kind = None
            if kind in ("step", "round", "served", "token") and progress is not None:
                progress({"kind": kind, "job": job, "rank": rank, **data})
            elif kind == "done":
                results[(job, rank)] = torch.load(io.BytesIO(data), weights_only=False)  # from our own workers
            elif kind == "error":
                reports.append(data)
            if kind not in (None, "error") and failing_since is None:
                continue
            # quiet, or failing: gather what is known and let diagnosis.blame decide
            seen = Seen(
                tuple(p.exitcode for p in procs),
                tuple(all((j, r) in results for j in range(len(jobs))) for r in range(world)),
                tuple(reports),
                tuple(status),
            )
            if seen.failing:
                failing_since = failing_since or time.monotonic()
                verdict = blame(seen, jobs, settled=time.monotonic() - failing_since > SETTLE)
                if verdict is not None:
                    raise verdict
                continue
            if list(status) != last_status:
                last_change, last_status = time.monotonic(), list(status)
            starting = any(status_of(status, r)[3] == "starting" for r in range(world))
            patience = (startup if starting else timeout) + GRACE
            if time.monotonic() - last_change > patience:
                raise stalled(status, jobs, world, patience)
        return results
    finally:
        _stop(procs)
        claim.release()  # after the workers are gone: no other run may pin onto their cores before
        messages.close()
        messages.join_thread()


def _stop(procs):
    """Terminate, then kill whatever is left; join all, so no process outlives the call."""
    procs = [p for p in procs if p.pid is not None]
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def _report(e: BaseException, rank: int, step: int, action: str | None) -> dict:
    """What a failing worker tells the caller: the error, for people and for diagnosis.blame."""
    reason = getattr(e, "reason", None)  # a CommError's: timeout, lost, failed or order
    return {
        "rank": rank,
        "step": step,
        "action": action,
        "error": f"{type(e).__name__}: {e}",
        "message": str(e),
        "traceback": traceback.format_exc(),
        "peer": getattr(e, "peer", None),
        "reason": reason,
        "group": getattr(e, "group", None),
        "plain": getattr(e, "plain", False),
        # torch.distributed reports a peer that went away as a plain RuntimeError (gloo: no subclass)
        "peer_may_have_died": reason in ("lost", "failed")
        or (reason is None and isinstance(e, RuntimeError) and not isinstance(e, WorkerError)),
    }


# -- the worker's side ------------------------------------------------------------------------
def _worker(rank: int, world: int, port: int, jobs: list[Job], body, messages, status, cores: tuple[int, ...]):
    job, step_now = 0, 0

    def set_status(step, index, state):
        nonlocal step_now
        step_now = step
        status[4 * rank : 4 * rank + 4] = [job, step, index, STATES.index(state)]

    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the caller stops us (_ctrl_c_for_the_caller_only)
        _first_of_all()
        _exit_with_parent()
        keep_freed_memory()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        first = jobs[0]
        if cores:  # claimed for this run by the caller (cores.claim_cores); () when not pinned
            pin_to_core(cores[rank])
        if first.gpus:
            torch.cuda.set_device(first.gpus[rank])
        _join(rank, world, port, first.backend, max(j.timeout for j in jobs), max(j.startup_timeout for j in jobs))
        for job, spec in enumerate(jobs):
            set_status(0, -1, "starting")
            report = lambda kind, data, j=job: messages.put((kind, j, rank, data))  # noqa: E731
            result = body(spec.work, rank, report, set_status)
            buf = io.BytesIO()
            torch.save(result, buf)
            messages.put(("done", job, rank, buf.getvalue()))
        dist.destroy_process_group()
    except BaseException as e:  # report, then leave: the caller stops the other ranks
        action = action_at(jobs[job], rank, int(status[4 * rank + 2]))
        messages.put(("error", job, rank, _report(e, rank, step_now, action)))
        messages.close()
        messages.join_thread()
        os._exit(REPORTED)


def _first_of_all() -> None:
    """MINIPIPE_WORKER_INIT="module:function" is called before the worker does anything else: a
    grader's sandbox (course/grading/sandbox.py) names its watch there, so that the learner's code
    a worker runs (a stage_step hook, an exercise's functions) is watched as in the sandbox."""
    init = os.environ.get("MINIPIPE_WORKER_INIT")
    if init:
        import importlib

        module, _, name = init.partition(":")
        getattr(importlib.import_module(module), name)()


def _join(rank: int, world: int, port: int, backend: str, timeout: float, startup_timeout: float) -> None:
    """Rendezvous through the caller's store and join the process group, or say plainly why not
    (torch's own error carries a C++ stack that tells a user nothing)."""
    seconds = group_timeout(timeout, startup_timeout)
    try:
        store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=timedelta(seconds=seconds))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=seconds))
    except Exception as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(
            f"rank {rank} could not join the other {world - 1} rank(s) on {backend} within "
            f"{seconds:g} s: {first_line}. If starting is only slow on this machine, raise "
            f"startup_timeout (now {startup_timeout:g} s)"
        ) from None


def _exit_with_parent():
    """If the caller dies (a killed kernel), leave at once rather than train on unseen. (The
    fork server can't tell us: every worker holds its 'alive' pipe open.)"""
    caller = mp.parent_process()

    def watch():
        caller.join()  # returns when the caller's end of the pipe closes: it exited
        os._exit(1)

    threading.Thread(target=watch, name="minipipe-caller-watch", daemon=True).start()


@contextlib.contextmanager
def _ctrl_c_for_the_caller_only():
    """Start the processes with SIGINT blocked, so that they (and the fork server, started with
    the first of them) inherit it blocked: a terminal's Ctrl-C reaches the whole process group,
    and a worker or a fork server still importing would die of it mid-way with a fatal error or a
    traceback of its own. Only the caller takes it, and stops the workers itself. While they
    start, a Ctrl-C is held back (another thread of the caller may receive the signal, and Python
    raises it in the main thread wherever it is, even half-way through starting a process) and
    raised once every process has a pid that the caller's clean-up can stop."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    held: list = []
    in_main = threading.current_thread() is threading.main_thread()  # only it may set a handler
    previous = signal.signal(signal.SIGINT, lambda *caught: held.append(caught)) if in_main else None
    try:
        yield
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if held and callable(previous):
        previous(*held[0])  # Python's own handler: raises KeyboardInterrupt here


@contextlib.contextmanager
def _main_module_hidden():
    """Workers need nothing from the caller's script, so don't let multiprocessing re-run it in
    each of them: a script then needs no `if __name__ == "__main__":` guard, and code read from
    stdin works too (as in a notebook, where there is no script to re-run)."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__spec__ = None
    try:
        yield
    finally:
        del main.__spec__
        main.__dict__.update(saved)


def _context():
    """forkserver: one server process imports torch once, then forks each worker from it, so a
    launch costs a fork rather than an import of torch per rank (seconds on a small machine).
    torch._dynamo too: the first optimizer a process makes imports it, and two ranks doing so at
    once took ~10 s per launch on a 2-core machine (0.4 s with it preloaded)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "minipipe.engine.train"])
    return ctx
