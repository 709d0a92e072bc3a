"""Elastic restarts, rehearsed on one machine: two torchrun "nodes" (agents meeting at a c10d
rendezvous on loopback, one worker each) train with --max-restarts 3 and --resume; a worker is
killed mid-step in the first attempt and another inside a checkpoint save in the second. torchrun
starts every worker again each time, the run resumes from the newest intact checkpoint by itself,
and its losses are those of an uninterrupted run.

Bounded by construction: two agents, at most 4 attempts of 2 workers (--max-restarts 3), each
wait under a timeout, and whatever is left is stopped at the end."""

import json
import os
import signal
import subprocess
import sys

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run
from tests.support.processes import descendants, free_port

pytestmark = pytest.mark.distributed
STEPS, EVERY = 10, 2
ARGS = [
    "-s",
    "1f1b",
    "-p",
    "2",
    "-m",
    "4",
    "--model",
    "mlp",
    "--model-arg",
    "width=16",
    "--model-arg",
    "depth=4",
    "--batch-size",
    "16",
    "--steps",
    str(STEPS),
    "--timeout",
    "10",
    "--startup-timeout",
    "60",
    "--checkpoint-every",
    str(EVERY),
    "--resume",
]


# attempt 0: rank 1 dies as it starts 1F2 of step 5 (steps 2 and 4 are saved); attempt 1 resumes at
# step 4, saves step 6, and rank 0 dies inside the save of step 8, after writing its own file (the
# torn step-000008.tmp is left); attempt 2 resumes at step 6 and finishes. Each fault fires once.
def faults(tmp_path):
    return [
        {"rank": 1, "step": 5, "action": "1F2", "kind": "kill", "once": str(tmp_path / "fired-mid-step")},
        {"rank": 0, "step": 8, "action": "save", "kind": "kill", "once": str(tmp_path / "fired-in-save")},
    ]


def stop(procs) -> None:
    """SIGTERM to each agent (torchrun stops its workers), then SIGKILL to anything of ours left."""
    left = set()
    for proc in procs:
        left |= descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(170)
def test_killed_workers_come_back_and_resume_with_the_uninterrupted_losses(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    ckpt = tmp_path / "ckpt"
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "MINIPIPE_FAULT": json.dumps(faults(tmp_path)), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    nodes = []
    for node in range(2):
        cmd = [
            torchrun,
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--max-restarts",
            "3",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            "minipipe-restart",
            "-m",
            "minipipe",
            "train",
            *ARGS,
            "--checkpoint-dir",
            str(ckpt),
            "--json",
            str(tmp_path / f"node{node}.json"),
            "--trace",
            str(tmp_path / f"trace{node}.json"),
        ]
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=130)[0])
    finally:
        stop(nodes)
    log = "\n".join(outputs)
    for proc, out in zip(nodes, outputs):
        assert proc.returncode == 0, out[-4000:]
    written = [json.loads(p.read_text()) for p in tmp_path.glob("node*.json")]
    assert len(written) == 1, log[-4000:]  # global rank 0 of the last attempt writes the results
    assert written[0]["first_step"] == 6, log[-4000:]
    assert os.path.exists(tmp_path / "fired-mid-step") and os.path.exists(tmp_path / "fired-in-save")
    assert sorted(os.listdir(ckpt)) == [".lock", "latest"] + [f"step-{s:06d}" for s in range(EVERY, STEPS + 1, EVERY)]
    local = run(
        RunConfig(
            schedule="1f1b", p=2, m=4, model="mlp", model_args={"width": 16, "depth": 4}, batch_size=16, steps=STEPS
        )
    )
    assert written[0]["losses"] == local.losses[6:]


@pytest.mark.parametrize(
    "restarts, shared, refused",
    [("0", "True", False), ("1", "True", True), ("1", "False", False), ("3", "False", False)],
)
def test_restarts_with_the_shared_rendezvous_store_are_refused_naming_the_fix(restarts, shared, refused):
    from minipipe.engine.torchrun import check_restarts

    env = {"TORCHELASTIC_MAX_RESTARTS": restarts, "TORCHELASTIC_USE_AGENT_STORE": shared}
    if refused:
        with pytest.raises(ValueError, match=r"--max-restarts 1 .*TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
            check_restarts(env)
    else:
        check_restarts(env)
