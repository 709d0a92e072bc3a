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
`launch` raises WorkerError naming the rank, the step and the action it was on. No process
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
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from .cores import Claim, claim_cores
from .placement import keep_freed_memory, pin_to_core

STATES = ("starting", "compute", "wait", "barrier", "done")
GRACE = 5.0     # seconds of silence the watchdog allows beyond a timeout before it stops the run


class WorkerError(RuntimeError):
    """A worker failed; `rank`, `step` and `action` say where."""

    def __init__(self, message: str, rank: int | None = None, step: int | None = None, action: str | None = None):
        super().__init__(message)
        self.rank, self.step, self.action = rank, step, action


@dataclass(frozen=True)
class Job:
    """One job for the group: what every rank's body gets (`work`), and what the machinery needs.
    Jobs run in one group of processes, so they must agree on backend, gpus and pin_cores."""

    work: Any
    backend: str = "gloo"               # the process group's: gloo | nccl
    gpus: tuple[int, ...] = ()          # rank r runs on CUDA device gpus[r]; () runs on the CPU
    pin_cores: bool = False             # each rank on a free core of its own (cores.py), when there are enough
    timeout: float = 60.0               # seconds a wait on a peer may take, inside a step
    startup_timeout: float = 300.0      # seconds to start: rendezvous, process group, building
    schedule: Any = None                # a Schedule, to name the action a rank was on (None: no actions)
    mesh: Any = None                    # a Mesh: global rank -> (pp, dp, tp), to say where a rank sits


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
        raise ValueError("jobs in one group of processes need the same backend, gpus and pin_cores; "
                         "launch them separately")
    if first.gpus and len(first.gpus) != world:
        raise ValueError(f"gpus names a device for {len(first.gpus)} ranks, but the group has {world}")
    ctx = _context()
    timeout, startup = max(j.timeout for j in jobs), max(j.startup_timeout for j in jobs)
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=group_timeout(timeout, startup)))
    messages = ctx.Queue()
    status = ctx.Array("d", [0, 0, -1, 0] * world, lock=False)   # per rank: job, step, action index, state
    claim = claim_cores(world) if first.pin_cores else Claim(())
    tell(claim.note, progress)
    procs = [ctx.Process(target=_worker, args=(r, world, store.port, jobs, body, messages, status, claim.cores),
                         name=f"minipipe-rank{r}", daemon=True) for r in range(world)]
    results: dict = {}
    try:
        with _main_module_hidden():
            for p in procs:
                p.start()
        if progress is not None:
            progress({"kind": "started", "pids": [p.pid for p in procs]})
        last_change, last_status = time.monotonic(), list(status)
        while len(results) < len(jobs) * world:
            try:
                kind, job, rank, data = messages.get(timeout=0.1)
            except queue_module.Empty:
                kind = None
            if kind is None:   # quiet: check that every rank is alive and that one of them moves
                if list(status) != last_status:
                    last_change, last_status = time.monotonic(), list(status)
                try:
                    _check_alive(procs, results, jobs, status)
                except WorkerError:
                    # A rank that lost a peer reports, then exits: its report may still be on its way,
                    # and it names the one that died first.
                    report = _pending_error(messages)
                    if report is None:
                        raise
                    raise _diagnose(report, procs, results, jobs, status) from None
                starting = any(_status_of(status, r)[3] == "starting" for r in range(world))
                patience = (startup if starting else timeout) + GRACE
                if time.monotonic() - last_change > patience:
                    raise _stalled(status, jobs, world, patience)
                continue
            if kind in ("step", "round", "served", "token") and progress is not None:
                progress({"kind": kind, "job": job, "rank": rank, **data})
            elif kind == "done":
                results[(job, rank)] = torch.load(io.BytesIO(data), weights_only=False)   # from our own workers
            elif kind == "error":
                raise _diagnose(data, procs, results, jobs, status)
        return results
    finally:
        _stop(procs)
        claim.release()     # after the workers are gone: no other run may pin onto their cores before
        messages.close()
        messages.join_thread()


def _pending_error(messages, wait: float = 0.5) -> dict | None:
    """The first error report still in the queue, if one arrives within `wait` seconds."""
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        try:
            kind, _, _, data = messages.get(timeout=left)
        except queue_module.Empty:
            return None
        if kind == "error":
            return data
    return None


REPORTED = 1    # the exit code of a worker that reported its error first (_worker)


def _check_alive(procs, results, jobs, status, skip: int | None = None, reported: bool = True):
    # a rank that died without a report goes first: the others that died reported losing it
    # (reported=False: only those count)
    for rank, p in sorted(enumerate(procs), key=lambda rp: (rp[1].exitcode == REPORTED, rp[0])):
        if rank == skip or (not reported and p.exitcode == REPORTED):   # skip: the reporter, which exits after
            continue
        finished = all((j, rank) in results for j in range(len(jobs)))
        if p.exitcode is not None and p.exitcode != 0 and not finished:
            how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exited with code {p.exitcode}"
            job, step, index, state = _status_of(status, rank)
            action = _action_at(jobs[job], rank, index)
            where = _doing(jobs, status, rank) + (" (its own output above says why)" if state == "starting" else "")
            raise WorkerError(f"{_who(jobs, rank)} died ({how}) {where}.\n" + _status_table(status, jobs, len(procs)),
                              rank=rank, step=step, action=action)


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


def _status_of(status, rank):
    job, step, index, state = status[4 * rank: 4 * rank + 4]
    return int(job), int(step), int(index), STATES[int(state)]


def _action_at(job: Job, rank: int, index: int) -> str | None:
    if job.schedule is None:
        return None
    acts = job.schedule.actions[job.mesh.coords(rank).pp if job.mesh is not None else rank]
    return str(acts[index]) if 0 <= index < len(acts) else None


def _who(jobs, rank: int) -> str:
    """'rank 5', and on a mesh with data or tensor parallelism its coordinates: 'rank 5 (pp=1 dp=0 tp=1)'."""
    mesh = jobs[0].mesh
    if mesh is None or mesh.world == mesh.pp:
        return f"rank {rank}"
    c = mesh.coords(rank)
    return f"rank {rank} (pp={c.pp} dp={c.dp} tp={c.tp})"


def _doing(jobs, status, rank) -> str:
    job, step, index, state = _status_of(status, rank)
    action = _action_at(jobs[job], rank, index)
    return {"compute": f"in step {step}, running {action}",
            "wait": f"in step {step}, waiting for data to run {action}" if action else f"finishing step {step}'s sends",
            "barrier": f"at the start of step {step}, waiting for the other ranks", "starting": "while starting up",
            "done": "after finishing"}[state]


def _status_table(status, jobs, world) -> str:
    return "\n".join(["where each rank was:"] + [f"  {_who(jobs, r)}: {_doing(jobs, status, r)}" for r in range(world)])


def _stalled(status, jobs, world, seconds: float) -> WorkerError:
    """No rank moved for longer than any wait may take: blame a rank stuck in its own work."""
    states = [_status_of(status, r) for r in range(world)]
    table = _status_table(status, jobs, world)
    busy = [r for r in range(world) if states[r][3] == "compute"]
    if busy:
        job, step, index, _ = states[busy[0]]
        action = _action_at(jobs[job], busy[0], index)
        return WorkerError(f"{_who(jobs, busy[0])} stopped responding in step {step} at action {action}: no rank made "
                           f"progress for {seconds:.0f} s; stopped the run.\n{table}",
                           rank=busy[0], step=step, action=action)
    starting = [r for r in range(world) if states[r][3] == "starting"]
    if starting:
        who = f"rank {starting[0]}" if len(starting) == 1 else f"ranks {', '.join(map(str, starting))}"
        return WorkerError(f"{who} did not finish starting up: no rank made progress for {seconds:.0f} s "
                           f"(startup_timeout {max(j.startup_timeout for j in jobs):g} s); stopped the run. Raise "
                           f"startup_timeout if starting is only slow on this machine.\n{table}",
                           rank=starting[0] if len(starting) == 1 else None)
    return WorkerError(f"no rank made progress for {seconds:.0f} s; stopped the run.\n{table}")


def _diagnose(data: dict, procs, results, jobs, status) -> WorkerError:
    """Blame the rank that caused the failure, not the first one to notice it. The report says
    what the worker knew (_report): a wait on `peer` or a collective of `group` that timed out,
    lost its peer or failed (parallel/errors.py), or an error that may come from a peer's death
    (any RuntimeError that is not minipipe's own verdict: torch.distributed raises those)."""
    world, peer, reason = len(procs), data.get("peer"), data.get("reason")
    if data.get("peer_may_have_died"):
        # A rank that died without a report is to blame; one that reported and exited only lost the
        # reporter. Its exit code arrives a moment later: wait for it, or until every other rank left.
        others = [p for r, p in enumerate(procs) if r != data["rank"]]
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and any(p.exitcode is None for p in others) \
                and not any(p.exitcode not in (None, 0, REPORTED) for p in others):
            time.sleep(0.05)
        try:
            _check_alive(procs, results, jobs, status, skip=data["rank"], reported=False)
        except WorkerError as death:
            return death
    hung = reason in ("timeout", "failed")
    if hung and peer is None and data.get("group"):
        # a collective timed out: blame a member of its group that is stuck in its own work
        stuck = [r for r in data["group"] if r != data["rank"] and _status_of(status, r)[3] == "compute"]
        peer = stuck[0] if stuck else None
    if hung and peer is not None:
        job, step, index, state = _status_of(status, peer)
        action = _action_at(jobs[job], peer, index)
        if state == "compute":
            return WorkerError(f"{_who(jobs, peer)} stopped responding in step {step} at action {action}: "
                               f"{data['message']}\n{_status_table(status, jobs, world)}",
                               rank=peer, step=step, action=action)
    where = f" in step {data['step']} at action {data['action']}" if data.get("action") else ""
    return WorkerError(f"{_who(jobs, data['rank'])} failed{where}: {data['error']}\n{_status_table(status, jobs, world)}\n\n"
                       f"--- traceback of rank {data['rank']} ---\n{data['traceback']}",
                       rank=data["rank"], step=data.get("step"), action=data.get("action"))


def _report(e: BaseException, rank: int, step: int, action: str | None) -> dict:
    """What a failing worker tells the caller: the error, for people and for _diagnose."""
    reason = getattr(e, "reason", None)           # a CommError's: timeout, lost, failed or order
    return {"rank": rank, "step": step, "action": action, "error": f"{type(e).__name__}: {e}", "message": str(e),
            "traceback": traceback.format_exc(), "peer": getattr(e, "peer", None), "reason": reason,
            "group": getattr(e, "group", None),
            # torch.distributed reports a peer that went away as a plain RuntimeError (gloo: no subclass)
            "peer_may_have_died": reason in ("lost", "failed")
                                  or (reason is None and isinstance(e, RuntimeError) and not isinstance(e, WorkerError))}


# -- the worker's side ------------------------------------------------------------------------
def _worker(rank: int, world: int, port: int, jobs: list[Job], body, messages, status, cores: tuple[int, ...]):
    job, step_now = 0, 0

    def set_status(step, index, state):
        nonlocal step_now
        step_now = step
        status[4 * rank: 4 * rank + 4] = [job, step, index, STATES.index(state)]

    try:
        _exit_with_parent()
        keep_freed_memory()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        first = jobs[0]
        if cores:      # claimed for this run by the caller (cores.claim_cores); () when not pinned
            pin_to_core(cores[rank])
        if first.gpus:
            torch.cuda.set_device(first.gpus[rank])
        _join(rank, world, port, first.backend, max(j.timeout for j in jobs), max(j.startup_timeout for j in jobs))
        for job, spec in enumerate(jobs):
            set_status(0, -1, "starting")
            report = lambda kind, data, j=job: messages.put((kind, j, rank, data))   # noqa: E731
            result = body(spec.work, rank, report, set_status)
            buf = io.BytesIO()
            torch.save(result, buf)
            messages.put(("done", job, rank, buf.getvalue()))
        dist.destroy_process_group()
    except BaseException as e:   # report, then leave: the caller stops the other ranks
        action = _action_at(jobs[job], rank, int(status[4 * rank + 2]))
        messages.put(("error", job, rank, _report(e, rank, step_now, action)))
        messages.close()
        messages.join_thread()
        os._exit(REPORTED)


def _join(rank: int, world: int, port: int, backend: str, timeout: float, startup_timeout: float) -> None:
    """Rendezvous through the caller's store and join the process group, or say plainly why not
    (torch's own error carries a C++ stack that tells a user nothing)."""
    seconds = group_timeout(timeout, startup_timeout)
    try:
        store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=timedelta(seconds=seconds))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=seconds))
    except Exception as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(f"rank {rank} could not join the other {world - 1} rank(s) on {backend} within "
                           f"{seconds:g} s: {first_line}. If starting is only slow on this machine, raise "
                           f"startup_timeout (now {startup_timeout:g} s)") from None


def _exit_with_parent():
    """If the caller dies (a killed kernel), leave at once rather than train on unseen. (The
    fork server can't tell us: every worker holds its 'alive' pipe open.)"""
    caller = mp.parent_process()

    def watch():
        caller.join()           # returns when the caller's end of the pipe closes: it exited
        os._exit(1)

    threading.Thread(target=watch, name="minipipe-caller-watch", daemon=True).start()


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
