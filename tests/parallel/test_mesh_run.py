"""Pipeline × data × tensor parallelism on real processes (gloo): the same math as the unsplit
model, every byte where the formulas say, pipelines lighter on the wire than tensor parallelism.

Each test starts its processes once and runs its configurations inside them (run_many)."""

import time

import pytest

from minipipe.engine.config import RunConfig, prepare
from minipipe.engine.diagnosis import WorkerError
from minipipe.engine.launch import run, run_many
from minipipe.traffic import TrafficKind
from tests.support.processes import workers_alive
from tests.support.reference import assert_bytes_match_the_formulas, assert_same_math

pytestmark = pytest.mark.distributed

GPT = {"width": 16, "heads": 2, "depth": 4, "block": 8, "vocab": 16}  # 6 layers
MLP = {"width": 16, "depth": 5}  # 6 layers
STEPS = 2


def config(**kw) -> RunConfig:
    base = dict(
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


def total_bytes(result) -> float:
    return sum(sum(sent.values()) for sent in result.traffic())


@pytest.mark.timeout(600)
def test_two_processes_dp_and_tp_and_pp_same_math_and_bytes():
    configs = [
        config(schedule="1f1b", p=1, dp=2),
        config(schedule="1f1b", p=1, dp=2, dp_overlap=False),
        config(schedule="1f1b", p=1, tp=2),
        config(schedule="1f1b", p=2),
        config(schedule="1f1b", p=1, tp=2, model="mlp", model_args=MLP),  # the MLP's all-gather form
        config(schedule="zb-h1", p=1, tp=2, model="mlp", model_args=MLP),
    ]  # tp inside a split backward
    results = run_many(configs)
    for result in results:
        assert_same_math(result, STEPS)
        assert_bytes_match_the_formulas(result)
    dp, no_overlap, tp, pp = results[:4]
    for result, overlapped in ((dp, True), (no_overlap, False)):  # the all-reduces start inside the backward, or after
        trace = result.traces[-1]
        first_talk = min(c.start for c in trace.collectives if c.rank == 0)
        last_compute = max(e.end for e in trace.rank_events(0))
        assert (first_talk < last_compute) == overlapped, (first_talk, last_compute)
    # the source texts' claim, measured on one model, one batch, 2 processes: a pipeline sends only
    # activations between stages, tensor parallelism talks inside every layer
    assert total_bytes(pp) < total_bytes(tp), (total_bytes(pp), total_bytes(tp))
    assert total_bytes(dp) == total_bytes(no_overlap)
    kinds = {k for sent in tp.traffic() for k, v in sent.items() if v}
    assert kinds == {TrafficKind.TP_ALL_REDUCE}
    assert {k for sent in results[4].traffic() for k, v in sent.items() if v} == {
        TrafficKind.TP_ALL_REDUCE,
        TrafficKind.TP_ALL_GATHER,
    }


@pytest.mark.timeout(600)
def test_four_processes_pp_by_dp_and_pp_by_tp_same_math_and_bytes():
    configs = [
        config(schedule=kind, p=2, m=m, **axis)
        for kind, m in (("1f1b", 2), ("interleaved", 2))
        for axis in ({"dp": 2}, {"tp": 2})
    ]
    configs.append(config(schedule="gpipe", p=4, model="mlp", model_args=MLP))
    configs.append(config(schedule="1f1b", p=1, tp=4, model="mlp", model_args=MLP))
    results = run_many(configs)
    for result in results:
        assert_same_math(result, STEPS)
        assert_bytes_match_the_formulas(result)
    # collectives are on the measured timeline, with the time each took
    dp_trace, tp_trace = results[0].traces[-1], results[1].traces[-1]
    assert {c.kind for c in dp_trace.collectives} == {TrafficKind.DP_ALL_REDUCE}
    assert {c.kind for c in tp_trace.collectives} == {TrafficKind.TP_ALL_REDUCE}
    assert all(c.end >= c.start for c in dp_trace.collectives + tp_trace.collectives)
    assert total_bytes(results[-2]) < total_bytes(results[-1])  # PP 4 vs TP 4 on the same MLP


@pytest.mark.timeout(900)
def test_eight_processes_pp_dp_tp_same_math():
    configs = [config(schedule=kind, p=2, dp=2, tp=2, m=2) for kind in ("1f1b", "interleaved")]
    for result in run_many(configs):
        assert result.plan.world == 8 and len(result.slices) == 4
        assert_same_math(result, STEPS)
        assert_bytes_match_the_formulas(result)
        memory = result.memory
        assert all(m.parameters > 0 and m.gradients == m.parameters and m.dp_buckets == m.parameters for m in memory)


@pytest.mark.timeout(300)
def test_checkpoints_on_a_mesh_resume_like_an_uninterrupted_run(tmp_path):
    # the MLP: Adam turns the GPT's key-bias gradient, zero up to rounding, into full-size steps
    base = config(schedule="1f1b", p=2, tp=2, steps=4, optimizer="adam", lr=1e-3, model="mlp", model_args=MLP)
    whole = run(base)
    run(base.replace(steps=2, checkpoint_dir=str(tmp_path)))
    files = sorted(p.name for p in (tmp_path / "step-000002").glob("*.pt"))
    assert files == ["rank0.pt", "rank1.pt", "rank2.pt", "rank3.pt"]  # tp slices of both stages
    resumed = run(
        base.replace(
            checkpoint_dir=str(tmp_path), resume=True, schedule="interleaved", p=1, dp=2, tp=2, return_grads=False
        )
    )
    assert resumed.first_step == 2
    assert resumed.losses == pytest.approx(whole.losses[2:], rel=1e-5)
    for name, w in whole.state.items():
        assert resumed.state[name] == pytest.approx(w, rel=1e-4, abs=1e-6), name


@pytest.mark.timeout(120)
def test_dp_replicas_write_no_duplicate_checkpoint(tmp_path):
    run(config(schedule="1f1b", p=2, dp=2, steps=1, checkpoint_dir=str(tmp_path)))
    assert sorted(p.name for p in (tmp_path / "step-000001").glob("*.pt")) == ["rank0.pt", "rank2.pt"]


@pytest.mark.timeout(120)
def test_a_killed_rank_in_a_two_by_two_mesh_is_named_with_its_coordinates():
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run(
            config(
                schedule="1f1b",
                p=2,
                dp=2,
                steps=3,
                timeout=5,
                fault={"rank": 3, "step": 1, "action": "1F1", "kind": "exit"},
            )
        )
    assert info.value.rank == 3 and "rank 3 (pp=1 dp=1 tp=0) died" in str(info.value)
    assert time.monotonic() - start < 60
    deadline = time.monotonic() + 5
    while workers_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers_alive() == set()


@pytest.mark.timeout(120)
def test_a_hung_rank_in_a_two_by_two_mesh_is_named():
    with pytest.raises(WorkerError) as info:
        run(
            config(
                schedule="1f1b",
                p=2,
                tp=2,
                steps=3,
                timeout=3,
                fault={"rank": 2, "step": 1, "action": "1F0", "kind": "sleep"},
            )
        )
    assert info.value.rank == 2 and "rank 2 (pp=1 dp=0 tp=0)" in str(info.value)


@pytest.mark.timeout(120)
def test_a_rank_that_raises_amid_tensor_parallel_collectives_is_blamed_not_its_tp_peer():
    """Rank 3 raises in its forward; rank 2, its tp peer, has its all-reduce fail under it (the watchdog's
    "collective failed" path, diagnosis.kind_of): the rank that raised is named, with its error."""
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run(
            config(
                schedule="1f1b",
                p=2,
                tp=2,
                steps=3,
                timeout=5,
                fault={"rank": 3, "step": 1, "action": "1F1", "kind": "raise"},
            )
        )
    assert info.value.rank == 3 and "rank 3 (pp=1 dp=0 tp=1) failed in step 1 at action 1F1" in str(info.value)
    assert "injected fault at 1F1" in str(info.value)
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(dp=8, tp=2), "16 processes .* at most 8"),
        (dict(tp=3), "tp=3 must divide the GPT block's heads"),
        (dict(dp=3), "does not split into dp=3 replicas × m=2"),
        (dict(tp=2, model="tests.support.own_model:make", model_args={}), "has no tensor-parallel form"),
        (dict(dp=0), r"dp \(data-parallel replicas\) must be a whole number >= 1"),
        (dict(cp=0), "cp must be a whole number >= 1"),
        (dict(dp=2, ep=4), r"ep=4 must divide dp·cp = 2·1 = 2"),
        (dict(dp=2, ep=2), r"ep=2: this model has no mixture-of-experts layer .* use ep=1, or a model with experts"),
    ],
)
def test_bad_mesh_input_is_refused_before_any_process_starts(changes, message):
    with pytest.raises(ValueError, match=message):
        prepare(config(**{"schedule": "1f1b", "p": 1, **changes}))
    assert workers_alive() == set()
