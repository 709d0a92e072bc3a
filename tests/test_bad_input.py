"""Bad input, at every public door: a ValueError (or exit code 2) that says what to change,
raised before any process starts, leaving no process, port or file behind."""

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import minipipe.engine.launch as launch
import minipipe.engine.workers as workers
from minipipe import Costs, make_schedule, simulate
from minipipe.engine.config import RunConfig, prepare
from minipipe.engine.partition import partition
from minipipe.schedule.ir import Schedule
from tests.support.processes import workers_alive

RUN_CASES = [
    (dict(p=0), "p \\(ranks\\) must be a whole number >= 1"),
    (dict(m=0), "m \\(micro-batches\\) must be"),
    (dict(schedule="1f1b", v=2), "1f1b: v=2 stages per rank does not apply.*interleaved"),
    (dict(schedule="interleaved", p=2, m=3, batch_size=30), "m=3 is not a multiple of p=2; use m=2 or m=4"),
    (dict(schedule="interleaved", v=1), "needs v >= 2"),
    (dict(schedule="zigzag"), "unknown schedule 'zigzag'"),
    (dict(model="resnet"), "unknown model 'resnet'"),
    (dict(model="mlp", model_args={"depth": 2}, p=4), "only 3 layers"),
    (dict(model="mlp", model_args={"layers": 4}), "has no setting layers"),
    (dict(batch_size=30, m=4), "batch_size=30 does not split into m=4 .* use batch_size=28 or 32"),
    (dict(batch_size=0), "batch_size \\(rows of a step's batch\\) must be a whole number >= 1"),
    (dict(steps=0), "steps must be a whole number >= 1"),
    (dict(optimizer="lion"), "unknown optimizer 'lion'"),
    (dict(lr=-1.0), "lr must be a finite number > 0"),
    (dict(timeout=0), "timeout must be at least 0.01 s, got 0"),
    (dict(timeout=0.001), "timeout must be at least 0.01 s, got 0.001: .*a few seconds"),
    (dict(timeout=float("inf")), "timeout must be at least 0.01 s, got inf"),
    (dict(startup_timeout=0.5), "startup_timeout must be at least 1 s, got 0.5: .*default is 300"),
    (dict(partition="random"), "unknown.*random|choose"),
    (dict(backend="mpi"), "unknown backend 'mpi'"),
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(backend="nccl", device="cpu"), "backend='nccl' needs GPUs"),
    (dict(threads=0), "threads must be a whole number >= 1"),
    (dict(message_order="fifo"), "unknown message_order 'fifo'; choose auto, issue or tag"),
    (dict(resume=True), "resume=True needs checkpoint_dir"),
    (dict(checkpoint_every=-1, checkpoint_dir="x"), "checkpoint_every must be"),
]
if not torch.cuda.is_available():
    RUN_CASES += [
        (dict(device="cuda"), "device='cuda' but no GPU is visible to torch; use device='cpu'"),
        (dict(backend="nccl"), "needs one GPU per rank|nccl needs GPUs|needs GPUs"),
    ]


@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """Fail if anything reached the point of starting processes (or opening the rendezvous port)."""
    monkeypatch.setattr(workers, "launch", lambda *a, **k: pytest.fail("processes were started for bad input"))
    monkeypatch.chdir(tmp_path)
    before = workers_alive()
    yield tmp_path
    assert workers_alive() == before
    assert list(tmp_path.iterdir()) == [], "bad input left files behind"


@pytest.mark.parametrize("changes,message", RUN_CASES, ids=[str(c) for c, _ in RUN_CASES])
def test_run_rejects_with_advice(no_launch, changes, message):
    with pytest.raises(ValueError, match=message):
        launch.run(RunConfig(**changes))


def test_checkpoint_of_another_model_is_rejected(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "step-000005").mkdir(parents=True)
    (ckpt / "latest").write_text("step-000005")
    (ckpt / "step-000005" / "meta.json").write_text(
        '{"model": "mlp", "model_args": {"width": 8}, "seed": 0, "batch_size": 32, "step": 5,'
        ' "param_shapes": {"0.linear.weight": [8, 8]}}'
    )
    with pytest.raises(ValueError, match="does not match this model .*Resume with the model settings"):
        prepare(RunConfig(checkpoint_dir=str(ckpt), resume=True))
    with pytest.raises(ValueError, match="already holds checkpoints .*resume=True"):
        prepare(RunConfig(checkpoint_dir=str(ckpt)))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: simulate(make_schedule("1f1b", 2, 2), Costs(forward=[1.0])), "got 1 values for 2 stages"),
        (lambda: simulate(make_schedule("1f1b", 2, 2), Costs(stage_scale={7: 2})), "names stage 7"),
        (lambda: simulate(Schedule.custom([["0F0", "0B0"], ["1B0", "1F0"]])), "rank 1 runs 1B0 before 1F0"),
        (lambda: make_schedule("gpipe", -1, 4), "p \\(ranks\\)"),
        (lambda: partition([torch.nn.Linear(2, 2)] * 3, 4), "4 stages but the model has only 3 layers"),
        (lambda: partition([torch.nn.Linear(2, 2)] * 3, 2, "time"), "sample_input"),
        (lambda: Schedule.from_text("rank 0: 0X0"), "not an action"),
    ],
)
def test_library_entry_points_reject_with_advice(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["simulate", "-s", "interleaved", "-p", "4", "-m", "6"], "use m=4 or m=8"),
        (["train", "-p", "2", "-m", "3"], "does not split into m=3"),
        (["train", "--model", "bert"], "unknown model 'bert'"),
        (["train", "--model-arg", "width"], "expected NAME=INTEGER"),
        (["simulate", "-p", "two"], "invalid int value"),
        (["train", "--timeout", "0.001"], "timeout must be at least 0.01 s, got 0.001"),
        (["train", "--startup-timeout", "0"], "startup_timeout must be at least 1 s"),
    ],
)
@pytest.mark.distributed  # the CLI, in a process of its own
def test_cli_exits_2_with_advice(tmp_path, argv, message):
    out = subprocess.run(
        [sys.executable, "-m", "minipipe", *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert pytest.importorskip("re").search(message, out.stderr), out.stderr
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=150, deadline=None)
@given(
    schedule=st.sampled_from(["naive", "gpipe", "1f1b", "interleaved", "nope"]),
    p=st.integers(-1, 9),
    m=st.integers(-1, 9),
    v=st.one_of(st.none(), st.integers(-1, 4)),
    model=st.sampled_from(["mlp", "gpt", "x"]),
    depth=st.integers(0, 6),
    batch_size=st.integers(-1, 40),
    steps=st.integers(-1, 3),
    lr=st.floats(-1, 1),
    timeout=st.floats(-1, 100),
    partition_=st.sampled_from(["uniform", "params", "bad"]),
)
def test_prepare_returns_a_plan_or_explains(
    schedule, p, m, v, model, depth, batch_size, steps, lr, timeout, partition_
):
    args = {"depth": depth, "width": 8} if model in ("mlp", "gpt") else {}
    config = RunConfig(
        schedule=schedule,
        p=p,
        m=m,
        v=v,
        model=model,
        model_args=args,
        batch_size=batch_size,
        steps=steps,
        lr=lr,
        timeout=timeout,
        partition=partition_,
    )
    try:
        plan = prepare(config)
    except ValueError as e:
        assert len(str(e)) > 20
        return
    assert plan.partition.n_stages == plan.schedule.n_stages
    assert len(plan.shapes) == plan.schedule.n_stages
    assert os.getcwd()  # nothing else to check: a plan came back


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(kind="interleaved", p=4, m=6, v=2), "use m=4 or m=8"),
        (dict(kind="interleaved", p=8, m=4, v=2), "m=4 is not a multiple of p=8; use m=8"),
    ],
)
def test_widget_shows_the_message_instead_of_raising(settings, message):
    from minipipe.viz import ScheduleExplorer

    explorer = ScheduleExplorer(**settings)
    assert pytest.importorskip("re").search(message, explorer.error)
