"""DeepSpeed's pipeline schedules read into minipipe's IR, its knobs mapped, and its PipelineModule
trained on gloo with minipipe's executor's losses, bit for bit."""

import pytest

from minipipe import make_schedule, simulate, validate
from minipipe.frameworks import deepspeed as ds
from minipipe.frameworks.timeline import order_of, planned
from tests.support.frameworks import GPT, RUNS, executor, need

need("deepspeed")

SHAPES = [(p, m) for p in (2, 3, 4, 8) for m in (1, 2, 3, 4, 8, 16)]


@pytest.mark.parametrize("p,m", SHAPES)
def test_deepspeeds_train_schedule_is_1f1b(p, m):
    theirs = validate(ds.to_schedule(p, m))
    assert planned(theirs) == planned(make_schedule("1f1b", p, m))
    assert simulate(theirs).bubble() == pytest.approx(simulate(make_schedule("1f1b", p, m)).bubble())


@pytest.mark.parametrize("p,m", SHAPES)
def test_deepspeeds_inference_schedule_is_minipipes(p, m):
    assert planned(ds.to_schedule(p, m, "inference")) == planned(make_schedule("inference", p, m))


def test_the_step_table_is_deepspeeds_lock_step():
    table = ds.step_table(2, 4)
    assert len(table) == 2 * (4 + 2 - 1)  # TrainSchedule's total_steps
    assert table[0] == ["F0", ""] and table[1] == [">a", "<a F0"]
    assert table[-1] == ["<g B3 step", ">g step"]


def test_knobs_map_both_ways_and_refuse_what_minipipe_lacks():
    config = ds.run_config(
        {
            "train_batch_size": 32,
            "train_micro_batch_size_per_gpu": 4,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        },
        num_stages=2,
        world_size=4,
        model="gpt",
        partition_method="uniform",
    )
    assert (config.p, config.dp, config.m, config.batch_size, config.lr, config.partition) == (
        2,
        2,
        4,
        32,
        1e-3,
        "uniform",
    )
    back = ds.ds_config_of(config)
    assert (back["train_micro_batch_size_per_gpu"], back["gradient_accumulation_steps"]) == (4, 4)
    good = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    for bad, match in [
        ({"partition_method": "type:Block"}, "type:regex"),
        ({"activation_checkpoint_interval": 1}, "recomputes"),
        ({"world_size": 3}, "multiple of num_stages"),
    ]:
        with pytest.raises(ValueError, match=match):
            ds.run_config(good, num_stages=2, **bad)
    with pytest.raises(ValueError, match="stage 0 or 1"):
        ds.run_config({**good, "zero_optimization": {"stage": 2}}, num_stages=2)


@pytest.mark.parametrize("depth,n", [(4, 2), (4, 3), (4, 4), (6, 2), (6, 3)])
def test_deepspeeds_partition_methods_cut_as_minipipes(depth, n):
    from deepspeed.runtime.utils import partition_balanced, partition_uniform

    from minipipe.engine.partition import partition
    from minipipe.models import make_task

    layers = make_task("gpt", batch_size=4, **{**GPT, "depth": depth}).layers()
    weights = [sum(q.numel() for q in layer.parameters()) for layer in layers]
    assert [int(b) for b in partition_balanced(weights, n)] == list(partition(layers, n, "params").bounds)
    assert partition_uniform(len(layers), n) == list(partition(layers, n, "uniform").bounds)


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_deepspeeds_pipeline_engine_trains_the_course_gpt_with_the_executors_losses():
    config, ours = RUNS["1f1b"], executor("1f1b")
    # beside the client optimizer (torch's Adam at config.lr) DeepSpeed ignores the JSON's optimizer block
    contrary = {**ds.ds_config_of(config), "optimizer": {"type": "SGD", "params": {"lr": 10.0}}}
    run = ds.train(config, ds_config=contrary)
    assert run.losses == ours.losses  # bit for bit
    assert run.parts == list(run.plan.partition.bounds)
    for trace in run.traces:  # what DeepSpeed ran: its TrainSchedule
        assert order_of(trace) == planned(make_schedule("1f1b", 2, 4))
        assert {w.kind for w in trace.waits} == {"recv", "send"}
    with pytest.raises(ValueError, match="TrainSchedule"):
        ds.train(config.replace(schedule="gpipe"))
    with pytest.raises(ValueError, match="gradient_accumulation_steps=8"):
        ds.train(config, ds_config={**contrary, "gradient_accumulation_steps": 8})
