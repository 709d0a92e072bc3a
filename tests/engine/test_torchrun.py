"""Many machines, rehearsed on one: two torchrun 'nodes' of 2 processes each train a 4-stage
pipeline (or 2 stages × 2 data-parallel replicas) and get exactly the losses of a single local launch."""

import json
import os
import subprocess
import sys

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run
from tests.support.processes import free_port

pytestmark = pytest.mark.distributed
ARGS = [
    "-s",
    "1f1b",
    "-m",
    "4",
    "--model",
    "mlp",
    "--steps",
    "4",
    "--batch-size",
    "16",
    "--model-arg",
    "width=16",
    "--model-arg",
    "depth=4",
    "--timeout",
    "30",
]
LAYOUTS = {"pp4": (["-p", "4"], dict(p=4)), "pp2xdp2": (["-p", "2", "--dp", "2"], dict(p=2, dp=2))}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_torchrun_nodes_match_a_local_run(tmp_path, layout):
    mesh_args, mesh = LAYOUTS[layout]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = []
    for node in range(2):
        cmd = [
            torchrun,
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            "minipipe-test",
            "-m",
            "minipipe",
            "train",
            *ARGS,
            *mesh_args,
            "--json",
            str(tmp_path / f"node{node}.json"),
            "--trace",
            str(tmp_path / f"trace{node}.json"),
        ]
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=150)[0])
    finally:
        for proc in nodes:
            proc.kill()
    for proc, out in zip(nodes, outputs):
        assert proc.returncode == 0, out[-3000:]
    # global rank 0 (on whichever node the rendezvous made node 0) writes the results
    written = [json.loads(p.read_text()) for p in tmp_path.glob("node*.json")]
    assert len(written) == 1, outputs
    local = run(
        RunConfig(
            schedule="1f1b", m=4, model="mlp", model_args={"width": 16, "depth": 4}, batch_size=16, steps=4, **mesh
        )
    )
    assert written[0]["losses"] == local.losses
