"""Context parallelism on real processes (gloo): the losses, gradients and weights of the unsplit
model on one process, alone and with pipeline, tensor and data parallelism; every ring step's bytes
where the formula says, counted as the engine sends them; the ring's steps on the measured timeline.

Float rounding: ring attention adds the blocks' softmax in another order than torch's attention
over the whole sequence, and the cp ranks' gradients are averaged, so losses, gradients and weights
agree to rtol 1e-5, atol 1e-6 (tests/support/reference.py), as every other layout's do.

Each test starts its processes once and runs its configurations inside them (run_many)."""

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.models import task_of
from minipipe.traffic import TrafficKind
from tests.support.reference import assert_bytes_match_the_formulas, assert_same_math

pytestmark = pytest.mark.distributed

GPT = {"width": 16, "heads": 2, "depth": 4, "block": 8, "vocab": 16}  # 6 layers; cp up to 4
STEPS = 2


def config(**kw) -> RunConfig:
    base = dict(
        p=1,
        model="gpt",
        model_args=GPT,
        batch_size=16,
        m=2,
        steps=STEPS,
        optimizer="sgd",
        lr=0.05,
        return_grads=True,
        timeout=60,
    )
    return RunConfig(**{**base, **kw})


def check(results):
    for result in results:
        assert_same_math(result, STEPS)
        assert_bytes_match_the_formulas(result)
        assert_ring_on_the_timeline(result)


def assert_ring_on_the_timeline(result):
    """Every traced step of every pipeline slice shows each ring step inside the action that ran
    it: cp − 1 per block in an F, cp in a B or I, none in a W, with the bytes it passed on."""
    cp, layers = result.plan.mesh.cp, task_of(result.config).layers()
    blocks = [
        sum(type(layers[i]).__name__ == "Block" for i in result.plan.partition.layers_of(s))
        for s in range(result.plan.schedule.n_stages)
    ]
    for trace in (t for traces in result.slices for t in traces):
        ring = [c for c in trace.collectives if c.kind is TrafficKind.CP_RING]
        for e in trace.events:
            inside = [c for c in ring if c.rank == e.rank and e.start <= c.start and c.end <= e.end]
            want = blocks[e.action.stage] * {"F": cp - 1, "B": cp, "I": cp, "W": 0}[e.action.op]
            assert len(inside) == want, f"{result.plan.mesh.describe()}: {len(inside)} ring steps in {e.action}"
        assert len(ring) == sum(blocks) * result.plan.schedule.m * (2 * cp - 1)
        assert sum(c.nbytes for c in ring) == sum(sent[TrafficKind.CP_RING] for sent in trace.traffic)


@pytest.mark.timeout(300)
def test_two_processes_cp_alone_and_with_a_split_backward(capsys, tmp_path):
    results = run_many([config(cp=2), config(cp=2, schedule="zb-h1", m=4), config(cp=2, checkpoint_dir=str(tmp_path))])
    check(results[:2])
    # the cp ranks hold the same weights: one of them writes them
    assert sorted(p.name for p in (tmp_path / f"step-{STEPS:06d}").glob("*.pt")) == ["rank0.pt"]
    from minipipe.cli import main  # the terminal's --cp runs the same thing

    assert (
        main(
            [
                "train",
                "-p",
                "1",
                "--cp",
                "2",
                "--model",
                "gpt",
                "--steps",
                "1",
                "--batch-size",
                "8",
                "-m",
                "2",
                "--model-arg",
                "block=8",
                "--model-arg",
                "width=16",
                "--trace",
                "/dev/null",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "cp=2" in out and "cp ring" in out


@pytest.mark.timeout(600)
def test_four_processes_cp_with_pp_tp_and_dp():
    check(
        run_many(
            [
                config(cp=2, p=2),
                config(cp=2, p=2, schedule="interleaved"),
                config(cp=2, tp=2),
                config(cp=2, dp=2),
                config(cp=4),
            ]
        )
    )


@pytest.mark.timeout(900)
def test_eight_processes_cp_with_pp_and_tp_and_with_dp_and_tp():
    check(run_many([config(cp=2, p=2, tp=2), config(cp=2, dp=2, tp=2)]))


@pytest.mark.timeout(120)
def test_a_hung_rank_in_the_ring_is_named_with_its_cp_coordinate():
    import time

    from minipipe.engine.diagnosis import WorkerError
    from minipipe.engine.launch import run
    from tests.support.processes import workers_alive

    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run(config(cp=2, steps=3, timeout=3, fault={"rank": 1, "step": 1, "action": "0F1", "kind": "sleep"}))
    assert info.value.rank == 1 and "rank 1 (pp=0 dp=0 cp=1 tp=0)" in str(info.value), str(info.value)
    assert time.monotonic() - start < 60
    deadline = time.monotonic() + 5
    while workers_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers_alive() == set()
