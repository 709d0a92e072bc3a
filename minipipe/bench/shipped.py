"""torch.distributed.pipelining as its users run it, for `minipipe bench` to compare against.

Its own two processes, started by torch's own launcher (`torchrun`), with torch's defaults:
no core pinning, glibc's default allocator, one thread per rank (torchrun's OMP_NUM_THREADS=1).
minipipe's workers tune both (see placement.pin_to_core and placement.keep_freed_memory), so this is
the yardstick for "what a user gets from each, out of the box"; torch inside minipipe's tuned
workers is the other yardstick, for the executors alone.

The two groups of processes take turns with minipipe's configurations, step by step, through a
store hosted by the benchmark's parent: minipipe's rank 0 posts `cmd/N` (which pipeline, which
step) and waits for `ms/N`, the step time that torch's processes measured themselves, barrier to
barrier, as minipipe's side does. While one group runs, the other sleeps in a blocking wait.

    with TorchProcesses() as port:     # in the parent; hand `port` to the workers
        ...
    shipped = ShippedClient(port, timeout=120)   # in minipipe's rank 0
    ms = shipped.step(size, "1f1b", m, step)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=600)  # longest quiet spell between two commands (a whole job's build)


class TorchProcesses:
    """Parent side: host the command store and start torch's processes under torchrun."""

    def __init__(self, world: int = 2):
        self.world = world

    def __enter__(self) -> int:
        self.store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # torchrun's default
        self.log = tempfile.NamedTemporaryFile("w+", prefix="minipipe-bench-torch-", suffix=".log", delete=False)
        self.store.set("log", self.log.name)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={self.world}",
                "--module",
                __name__,
                str(self.store.port),
            ],
            env=env,
            start_new_session=True,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        return self.store.port

    def __exit__(self, *exc) -> None:
        try:
            self.store.set(f"cmd/{self.store.add('next', 1) - 1}", "exit")
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:  # stuck or still starting: its processes go with it
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        if self.proc.returncode == 0:
            os.unlink(self.log.name)


class ShippedClient:
    """minipipe's rank 0 side: run one step of torch's pipeline in torch's processes, get its time."""

    def __init__(self, port: int, timeout: float):
        self.store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=TIMEOUT)
        self.timeout = timeout

    def step(self, size: dict, kind: str, m: int, step: int) -> float:
        n = int(self.store.add("next", 1)) - 1  # commands are numbered across all jobs
        self.store.set(f"cmd/{n}", json.dumps({"size": size, "kind": kind, "m": m, "step": step}))
        try:
            self.store.wait([f"ms/{n}"], timedelta(seconds=self.timeout))
        except dist.DistStoreError:
            raise RuntimeError(
                f"torch's pipeline (its own processes, under torchrun) did not finish step {step} "
                f"of {kind} m={m} in {self.timeout:g} s; its output is in "
                f"{self.store.get('log').decode()}"
            ) from None
        answer = self.store.get(f"ms/{n}").decode()
        if answer.startswith("error"):
            raise RuntimeError(f"torch's pipeline (its own processes, under torchrun) failed:\n{answer}")
        return float(answer)


def worker(port: int) -> None:
    """One of torch's ranks: follow the commands in order; rank 0 answers with the step time."""
    from ..models.catalog import task_of
    from .sizes import plan_for
    from .torch_pp import TorchPipeline

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    store = dist.TCPStore("127.0.0.1", port, None, is_master=False, timeout=TIMEOUT)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pipes: dict = {}
    try:
        n = 0
        while True:
            text = store.get(f"cmd/{n}").decode()  # blocks; raises if the parent is gone
            if text == "exit":
                break
            cmd = json.loads(text)
            name = json.dumps([cmd["size"], cmd["kind"], cmd["m"]])
            if name not in pipes:
                plan = plan_for(cmd["size"], cmd["kind"], cmd["m"])
                task = task_of(plan.config)
                s, cut, layers = plan.schedule, plan.partition, task.layers()
                mine = {k: torch.nn.Sequential(*(layers[i] for i in cut.layers_of(k))) for k in s.stages_of(rank)}
                pipes[name] = TorchPipeline(s.kind, mine, s.n_stages, s.m, task.loss), task
            pipe, task = pipes[name]
            x, y = task.batch(cmd["step"])
            dist.barrier()
            t0 = time.perf_counter()
            pipe.step(x, y)
            dist.barrier()
            if rank == 0:
                store.set(f"ms/{n}", str(1000 * (time.perf_counter() - t0)))
            n += 1
    except BaseException:
        store.set(f"ms/{n}", f"error on rank {rank}:\n{traceback.format_exc()}")
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    worker(int(sys.argv[1]))
