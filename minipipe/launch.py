"""Start p processes on this machine, train, and bring the results back to the caller.

    from minipipe import run, RunConfig
    result = run(RunConfig(schedule="1f1b", p=2, m=4, steps=20))
    result.losses, result.traces[-1].bubble(), result.state

Works from a script or a notebook cell: the worker code lives in this package (functions
defined in a notebook cannot be sent to a spawned process). Every run gets its own rendezvous
port (a store this process hosts on a free port). If a worker raises, dies or stops responding,
the others are stopped, no process is left behind, and `run` raises WorkerError naming the
rank, the step and the action it was on.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import multiprocessing as mp
import os
import queue as queue_module
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from .config import Plan, RunConfig, prepare
from .execute import measured_trace
from .trace import Trace

STATES = ("starting", "compute", "wait", "barrier", "done")


class WorkerError(RuntimeError):
    """A worker failed; `rank`, `step` and `action` say where."""

    def __init__(self, message: str, rank: int | None = None, step: int | None = None, action: str | None = None):
        super().__init__(message)
        self.rank, self.step, self.action = rank, step, action


@dataclass
class RunResult:
    config: RunConfig
    plan: Plan
    losses: list[float]                 # one per step run: the mean loss over the global batch
    first_step: int                     # the step the run began at (> 0 when it resumed)
    traces: list[Trace]                 # measured, one per traced step
    state: dict                         # the trained model's state_dict, as nn.Sequential(*task.layers())
    grads: dict | None                  # gradients of the first step (config.return_grads)
    peak_held: list[int]                # per rank: most micro-batches (stage chunks) held at once
    peak_bytes: list[int]               # per rank: peak bytes of activations kept for backward
    step_ms: list[float]                # wall time of each step on rank 0, barrier to barrier

    def model(self):
        """The trained model, whole, on one process."""
        from .models import make_task

        c = self.config
        model = torch.nn.Sequential(*make_task(c.model, batch_size=c.batch_size, seed=c.seed, **c.model_args).layers())
        model.load_state_dict(self.state)
        return model


def run(config: RunConfig | None = None, progress: Callable[[dict], None] | None = None, **changes) -> RunResult:
    """Train `config` (or RunConfig(**changes)) on p local processes; see the module docstring."""
    config = (config or RunConfig()).replace(**changes) if changes or config is None else config
    return run_many([config], progress)[0]


def run_many(configs: list[RunConfig], progress=None) -> list[RunResult]:
    """Several runs with the same p in one group of processes (starting one costs seconds)."""
    if not configs:
        return []
    plans = [prepare(c) for c in configs]
    world = plans[0].schedule.p
    if any(pl.schedule.p != world or pl.backend != plans[0].backend for pl in plans):
        raise ValueError("run_many needs the same p and backend for every config; split them into separate calls")
    from .train import train_rank

    payloads = _launch(plans, world, progress, train_rank)
    return [_collect(pl, [payloads[(j, r)] for r in range(world)]) for j, pl in enumerate(plans)]


# -- the parent side ------------------------------------------------------------------------
def _launch(plans: list, world: int, progress, body) -> dict:
    """Run `body(job, rank, report, status)` for every job, in order, on `world` processes;
    returns {(job index, rank): payload}. A job has .schedule (or None), .backend, .device
    and .timeout."""
    ctx = _context()
    timeout = max(pl.timeout for pl in plans)
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout))
    messages = ctx.Queue()
    status = ctx.Array("d", [0, 0, -1, 0] * world, lock=False)   # per rank: job, step, action index, state
    procs = [ctx.Process(target=_worker, args=(r, world, store.port, plans, body, messages, status),
                         name=f"minipipe-rank{r}", daemon=True) for r in range(world)]
    results: dict = {}
    try:
        with _main_module_hidden():
            for p in procs:
                p.start()
        if progress is not None:
            progress({"kind": "started", "pids": [p.pid for p in procs]})
        last_change, last_status = time.monotonic(), list(status)
        while len(results) < len(plans) * world:
            try:
                kind, job, rank, data = messages.get(timeout=0.1)
            except queue_module.Empty:
                kind = None
            if kind is None:   # quiet: check that every rank is alive and that one of them moves
                if list(status) != last_status:
                    last_change, last_status = time.monotonic(), list(status)
                _check_alive(procs, results, plans, status)
                if time.monotonic() - last_change > timeout + 5:
                    raise _stalled(status, plans, world, timeout + 5)
                continue
            if kind in ("step", "round") and progress is not None:
                progress({"kind": kind, "job": job, "rank": rank, **data})
            elif kind == "done":
                results[(job, rank)] = torch.load(io.BytesIO(data), weights_only=False)
            elif kind == "error":
                raise _diagnose(data, procs, results, plans, status)
        return results
    finally:
        _stop(procs)
        messages.close()
        messages.join_thread()


def _check_alive(procs, results, plans, status):
    for rank, p in enumerate(procs):
        finished = all((j, rank) in results for j in range(len(plans)))
        if p.exitcode is not None and p.exitcode != 0 and not finished:
            how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exited with code {p.exitcode}"
            job, step, index, state = _status_of(status, rank)
            action = _action_at(plans[job], rank, index)
            where = _doing(plans, status, rank) + (" (its own output above says why)" if state == "starting" else "")
            raise WorkerError(f"rank {rank} died ({how}) {where}.\n" + _status_table(status, plans, len(procs)),
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


def _action_at(plan, rank: int, index: int) -> str | None:
    if plan.schedule is None:
        return None
    acts = plan.schedule.actions[rank]
    return str(acts[index]) if 0 <= index < len(acts) else None


def _doing(plans, status, rank) -> str:
    job, step, index, state = _status_of(status, rank)
    action = _action_at(plans[job], rank, index)
    return {"compute": f"in step {step}, running {action}",
            "wait": f"in step {step}, waiting for data to run {action}" if action else f"finishing step {step}'s sends",
            "barrier": f"at the start of step {step}, waiting for the other ranks", "starting": "while starting up",
            "done": "after finishing"}[state]


def _status_table(status, plans, world) -> str:
    return "\n".join(["where each rank was:"] + [f"  rank {r}: {_doing(plans, status, r)}" for r in range(world)])


def _stalled(status, plans, world, seconds: float) -> WorkerError:
    """No rank moved for longer than any wait may take: blame a rank stuck in its own work."""
    busy = [r for r in range(world) if _status_of(status, r)[3] == "compute"]
    table = _status_table(status, plans, world)
    if not busy:
        return WorkerError(f"no rank made progress for {seconds:.0f} s; stopped the run.\n{table}")
    job, step, index, _ = _status_of(status, busy[0])
    action = _action_at(plans[job], busy[0], index)
    return WorkerError(f"rank {busy[0]} stopped responding in step {step} at action {action}: no rank made "
                       f"progress for {seconds:.0f} s; stopped the run.\n{table}", rank=busy[0], step=step, action=action)


def _diagnose(data: dict, procs, results, plans, status) -> WorkerError:
    """Blame the rank that caused the failure, not the first one to notice it."""
    world, peer = len(procs), data.get("peer")
    lost = data.get("reason") == "lost" or any(k in data["error"] for k in ("closed by peer", "reset by peer"))
    if lost:
        others = [p for r, p in enumerate(procs) if r != data["rank"]]
        deadline = time.monotonic() + 2          # the dead rank's exit code arrives a moment later
        while all(p.exitcode is None for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            _check_alive(procs, results, plans, status)
        except WorkerError as death:
            return death
    if data.get("reason") == "timeout" and peer is not None:
        job, step, index, state = _status_of(status, peer)
        action = _action_at(plans[job], peer, index)
        if state == "compute":
            return WorkerError(f"rank {peer} stopped responding in step {step} at action {action}: "
                               f"{data['error'].split(': ', 1)[-1]}\n{_status_table(status, plans, world)}",
                               rank=peer, step=step, action=action)
    where = f" in step {data['step']} at action {data['action']}" if data.get("action") else ""
    return WorkerError(f"rank {data['rank']} failed{where}: {data['error']}\n{_status_table(status, plans, world)}\n\n"
                       f"--- traceback of rank {data['rank']} ---\n{data['traceback']}",
                       rank=data["rank"], step=data.get("step"), action=data.get("action"))


def _collect(plan: Plan, payloads: list[dict]) -> RunResult:
    by_step: dict[int, dict] = {}
    step_ms = dict(enumerate(payloads[0]["step_ms"]))
    for pay in payloads:
        for step, rec in pay["records"]:
            by_step.setdefault(step, {})[pay["rank"]] = rec
    traces = [measured_trace(plan.schedule, [by_step[step][r] for r in sorted(by_step[step])],
                             {"step": step, "device": plan.device, "backend": plan.backend,
                              "step_ms": step_ms.get(step)})
              for step in sorted(by_step)]
    losses = next((pay["losses"] for pay in payloads if pay["losses"]), [])
    state, grads = {}, {}
    for pay in payloads:
        state.update(pay["state"])
        grads.update(pay["grads"] or {})
    return RunResult(plan.config, plan, losses, payloads[0]["first_step"], traces, state, grads or None,
                     [pay["peak_held"] for pay in payloads], [pay["peak_bytes"] for pay in payloads],
                     payloads[0]["step_ms"])


# -- the worker side ------------------------------------------------------------------------
def _worker(rank: int, world: int, port: int, plans: list, body, messages, status):
    job, step_now = 0, 0

    def set_status(step, index, state):
        nonlocal step_now
        step_now = step
        status[4 * rank: 4 * rank + 4] = [job, step, index, STATES.index(state)]

    try:
        _exit_with_parent()
        _keep_freed_memory()
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        plan0 = plans[0]
        if getattr(plan0, "pin_cores", False):
            pin_to_core(rank, world)
        if plan0.device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        timeout = timedelta(seconds=max(pl.timeout for pl in plans))
        store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=timeout)
        dist.init_process_group(plan0.backend, store=store, rank=rank, world_size=world, timeout=timeout)
        for job, plan in enumerate(plans):
            set_status(0, -1, "starting")
            report = lambda kind, data, j=job: messages.put((kind, j, rank, data))   # noqa: E731
            payload = body(plan, rank, report, set_status)
            buf = io.BytesIO()
            torch.save(payload, buf)
            messages.put(("done", job, rank, buf.getvalue()))
        dist.destroy_process_group()
    except BaseException as e:   # report, then leave: the parent stops the other ranks
        action = _action_at(plans[job], rank, int(status[4 * rank + 2]))
        messages.put(("error", job, rank, {"rank": rank, "step": step_now, "action": action,
                                           "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                                           "peer": getattr(e, "peer", None), "reason": getattr(e, "reason", None)}))
        messages.close()
        messages.join_thread()
        os._exit(1)


def pin_to_core(rank: int, world: int, cores: list[int] | None = None) -> None:
    """Give each rank a core of its own when there are enough: otherwise one rank's
    communication threads compete with another rank's compute, and every step pays for it.
    Applies to every thread of the process (gloo's too), and to threads started later."""
    cores = cores or sorted(os.sched_getaffinity(0))
    if len(cores) >= world:
        set_cores({cores[rank]})


def set_cores(cores: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:    # a thread that just ended
            pass


def _keep_freed_memory() -> None:
    """Every step allocates and frees the same activation and gradient buffers. By default
    glibc returns large blocks to the kernel, and the next step pays a page fault per 4 KiB to
    get them back (~1,000 a step on the course's MLP); keeping them costs nothing here."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:          # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 * 2**20)
    libc.mallopt(m_trim_threshold, 2**30)


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
    launch costs a fork rather than an import of torch per rank (seconds on a small machine)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "minipipe.train"])
    return ctx
