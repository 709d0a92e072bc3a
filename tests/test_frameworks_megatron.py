"""Megatron-Core's pipeline loops: their order recorded for (p, m, v) and compared with minipipe's,
and the course GPT trained through them on gloo with the unsplit model's losses."""
import pytest
from frameworks import GPT, need
from reference import reference_run

from minipipe import RunConfig, make_schedule, simulate, validate
from minipipe.frameworks import megatron as mg
from minipipe.frameworks.knobs import megatron_flags
from minipipe.frameworks.timeline import order_of, planned

need("megatron")


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 5), (4, 4), (4, 8)])
def test_megatrons_1f1b_loop_runs_minipipes_1f1b(p, m):
    rec = mg.record(p, m)
    assert planned(validate(rec.schedule)) == planned(make_schedule("1f1b", p, m))
    assert all(any("send" in c or "recv" in c for c in stream) for stream in rec.streams)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (2, 6, 3), (4, 8, 2), (4, 16, 2), (3, 6, 2)])
def test_megatrons_interleaved_loop_with_groups_of_p_runs_minipipes_interleaved(p, m, v):
    assert planned(validate(mg.record(p, m, v).schedule)) == planned(make_schedule("interleaved", p, m, v))


def test_a_group_of_m_is_another_order_that_holds_more():
    theirs = validate(mg.record(4, 8, 2, group_size=8).schedule)
    ours = make_schedule("interleaved", 4, 8, 2)
    assert planned(theirs) != planned(ours)
    assert theirs.actions[0][:8] == tuple(a for a in theirs.actions[0] if a.op == "F" and a.stage == 0)   # all of chunk 0 first
    assert max(simulate(theirs).peak_inflight()) > max(simulate(ours).peak_inflight())


def test_sizes_megatron_refuses_are_refused_first():
    for args, match in [((1, 4), "p >= 2"), ((4, 8, 2, 2), "p <= group_size"), ((4, 8, 2, 6), "m % group_size"),
                        ((2, 4, None, 2), "interleaved loop only")]:
        with pytest.raises(ValueError, match=match):
            mg.record(*args)


def test_megatron_flags_map_to_minipipe_and_the_planner():
    job = megatron_flags("--pipeline-model-parallel-size 4 --tensor-model-parallel-size 2 "
                         "--num-layers-per-virtual-pipeline-stage 4 --global-batch-size 512 --micro-batch-size 2 "
                         "--sequence-parallel --recompute-granularity selective", world=64, num_layers=32)
    assert job["run"] == {"schedule": "interleaved", "p": 4, "v": 2, "m": 32, "dp": 8, "tp": 2, "batch_size": 512,
                          "dp_overlap": False}
    assert job["planner"]["layout"]["recompute"] == "selective" and job["planner"]["setup"]["sequence_parallel"]
    assert job["group_size"] == 4
    with pytest.raises(ValueError, match="multiple of tp × pp"):
        megatron_flags("--pipeline-model-parallel-size 3 --global-batch-size 8 --micro-batch-size 1", world=8, num_layers=6)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_megatrons_loops_train_the_course_gpt_with_the_unsplit_losses():
    for kind, v in (("1f1b", 1), ("interleaved", 2)):
        config = RunConfig(schedule=kind, p=2, m=4, v=v, model="gpt", model_args=GPT, batch_size=16, steps=3)
        run = mg.train(config)
        losses, _, _ = reference_run(config, config.steps)
        assert run.losses == pytest.approx(losses, rel=1e-5), kind
        assert all(order_of(t) == planned(make_schedule(kind, 2, 4, v)) for t in run.traces), kind
    # With two ranks the batched exchange crosses activations and gradients (megatron.py says why)
    crossed = mg.train(config, batched=True)
    assert crossed.losses[0] != pytest.approx(losses[0], rel=1e-4)
