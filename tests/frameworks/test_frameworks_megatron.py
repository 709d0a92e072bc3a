"""Megatron-Core's pipeline loops: their order recorded for (p, m, v) and compared with minipipe's,
the exchange Megatron-LM sets (and refuses), and the course GPT trained through them on gloo with
minipipe's executor's losses, bit for bit: one pipeline, and two (p=2 × dp=2)."""

import pytest

from minipipe import make_schedule, simulate, validate
from minipipe.frameworks import megatron as mg
from minipipe.frameworks.knobs import megatron_flags
from minipipe.frameworks.timeline import order_of, planned
from tests.support.frameworks import RUNS, executor, need

need("megatron")


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 5), (4, 4), (4, 8)])
def test_megatrons_1f1b_loop_runs_minipipes_1f1b(p, m):
    rec = mg.record(p, m)
    assert planned(validate(rec.schedule)) == planned(make_schedule("1f1b", p, m))
    assert all(any("send" in c or "recv" in c for c in stream) for stream in rec.streams)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (2, 6, 3), (4, 8, 2), (4, 16, 2), (3, 6, 2)])
def test_megatrons_interleaved_loop_with_groups_of_p_runs_minipipes_interleaved(p, m, v):
    ours = planned(make_schedule("interleaved", p, m, v))
    overlapped = mg.record(p, m, v)  # Megatron-LM's default: overlapped p2p
    assert overlapped.overlap_p2p_comm and planned(validate(overlapped.schedule)) == ours
    assert planned(mg.record(p, m, v, overlap_p2p_comm=False).schedule) == ours


def test_a_group_of_m_is_another_order_that_holds_more():
    theirs = validate(mg.record(4, 8, 2, group_size=8).schedule)
    ours = make_schedule("interleaved", 4, 8, 2)
    assert planned(theirs) != planned(ours)
    assert theirs.actions[0][:8] == tuple(
        a for a in theirs.actions[0] if a.op == "F" and a.stage == 0
    )  # all of chunk 0 first
    assert max(simulate(theirs).peak_inflight()) > max(simulate(ours).peak_inflight())


def test_sizes_megatron_refuses_are_refused_first():
    for args, match in [
        ((1, 4), "p >= 2"),
        ((4, 8, 2, 2), "p <= group_size"),
        ((4, 8, 2, 6), "m % group_size"),
        ((2, 4, None, 2), "interleaved loop only"),
    ]:
        with pytest.raises(ValueError, match=match):
            mg.record(*args)


def test_the_exchange_is_megatron_lms():
    # validate_args: no overlap for 1F1B; core_transformer_config_from_args: batched = not overlapped
    assert mg.exchange(2, interleaved=False) == (False, True)
    assert mg.exchange(2, interleaved=True) == (True, False)
    assert mg.exchange(3, interleaved=True, overlap_p2p_comm=False) == (False, True)  # p > 2: allowed
    with pytest.raises(ValueError, match="pipeline_model_parallel_size > 2"):  # p = 2: refused
        mg.exchange(2, interleaved=True, overlap_p2p_comm=False)
    with pytest.raises(ValueError, match="interleaved loop only"):
        mg.exchange(4, interleaved=False, overlap_p2p_comm=True)
    assert mg.exchange(2, True, overlap_p2p_comm=False, megatron_lm_checks=False) == (False, True)


def test_megatron_flags_map_to_minipipe_and_the_planner():
    job = megatron_flags(
        "--pipeline-model-parallel-size 4 --tensor-model-parallel-size 2 "
        "--num-layers-per-virtual-pipeline-stage 4 --global-batch-size 512 --micro-batch-size 2 "
        "--sequence-parallel --recompute-granularity selective",
        world=64,
        num_layers=32,
    )
    assert job["run"] == {
        "schedule": "interleaved",
        "p": 4,
        "v": 2,
        "m": 32,
        "dp": 8,
        "tp": 2,
        "batch_size": 512,
        "dp_overlap": False,
    }
    assert job["planner"]["layout"]["recompute"] == "selective" and job["planner"]["setup"]["sequence_parallel"]
    assert job["group_size"] == 4 and job["overlap_p2p_comm"]  # Megatron-LM's default for interleaving
    flags = (
        "--num-layers-per-virtual-pipeline-stage 2 --global-batch-size 16 --micro-batch-size 1 "
        "--no-overlap-p2p-communication --pipeline-model-parallel-size"
    )
    assert not megatron_flags(f"{flags} 3", world=3, num_layers=12)["overlap_p2p_comm"]
    with pytest.raises(ValueError, match="greater than 2"):
        megatron_flags(f"{flags} 2", world=2, num_layers=8)
    assert not megatron_flags(
        "--pipeline-model-parallel-size 2 --global-batch-size 8 --micro-batch-size 1", world=2, num_layers=8
    )["overlap_p2p_comm"]  # 1F1B: never overlapped
    with pytest.raises(ValueError, match="multiple of tp × pp"):
        megatron_flags(
            "--pipeline-model-parallel-size 3 --global-batch-size 8 --micro-batch-size 1", world=8, num_layers=6
        )


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_megatrons_loops_train_the_course_gpt_with_the_executors_losses():
    names = ("1f1b", "interleaved")
    for name, run in zip(names, mg.train_many([RUNS[n] for n in names])):  # one group of processes
        ours = executor(name)
        assert run.overlap_p2p_comm == (name == "interleaved")  # batched for 1F1B, overlapped interleaved
        assert run.losses == ours.losses, name  # bit for bit
        assert all(order_of(t) == planned(ours.plan.schedule) for t in run.traces), name
    with pytest.raises(ValueError, match="greater than 2"):
        mg.train(RUNS["interleaved"], overlap_p2p_comm=False)
    # what Megatron-LM refuses, run anyway: the batched exchange crosses activations and gradients
    crossed = mg.train(RUNS["interleaved"], overlap_p2p_comm=False, megatron_lm_checks=False)
    assert crossed.losses[0] != pytest.approx(ours.losses[0], rel=1e-4)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_two_pipelines_exchange_within_their_own_and_average_their_gradients():
    ours = executor("interleaved dp2")  # pipelines of global ranks (0, 2) and (1, 3)
    run = mg.train(RUNS["interleaved dp2"])
    assert run.losses == ours.losses
    assert all(order_of(t) == planned(ours.plan.schedule) for t in run.traces)
    with pytest.raises(ValueError, match="tp=1"):
        mg.train(RUNS["interleaved dp2"].replace(dp=1, tp=2))
