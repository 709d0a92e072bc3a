"""Serving on the one executor, in this process (a pipeline of one rank needs no process group):
generation's rounds, whose token feedback the schedule derives; lazy inputs and the output sink;
the one stage builder, for training and serving; the one config vocabulary."""

import dataclasses
import time

import pytest
import torch

from minipipe import simulate
from minipipe.engine.config import EngineConfig, RunConfig
from minipipe.engine.config import prepare as prepare_run
from minipipe.engine.execute import Executor
from minipipe.engine.train import build_stages
from minipipe.models import make_task
from minipipe.models.catalog import task_of
from minipipe.schedule.kinds import make_schedule
from minipipe.schedule.ops import F
from minipipe.schedule.rounds import Rounds, repeat
from minipipe.schedule.validate import ScheduleError, validate
from minipipe.serve.api import GenerateConfig, ServeConfig, prepare
from minipipe.serve.rank import StreamFeed, TokenFeed

CPU = torch.device("cpu")


def whole(config, state=None):
    model = torch.nn.Sequential(*make_task(config.model, seed=config.seed, **config.model_args).layers())
    if state is not None:
        model.load_state_dict(state)
    return model.eval()


def executor_of(plan):
    stages = build_stages(plan, 0, task_of(plan.config), CPU)
    return Executor(0, plan.schedule, stages, plan.shapes, CPU, plan.in_order, plan.timeout, clock=time.perf_counter)


# -- the rounds schedule ------------------------------------------------------------------------
def test_rounds_feed_the_last_stage_back_to_stage_0_as_a_message():
    one = make_schedule("inference", 2, 3, 2)
    s = repeat(one, 4)
    assert (s.m, s.per_round, s.rounds, s.forward_only) == (12, 3, 4, True)
    assert s.needs(F(0, 2)) == () and s.needs(F(0, 5)) == (F(3, 2),) and s.needs(F(2, 5)) == (F(1, 5),)
    fed = [(d, src, dst) for d, src, dst in s.messages if d.stage == s.n_stages - 1]
    assert fed == [(F(3, mb), 1, 0) for mb in range(9)]  # the last round's tokens go nowhere
    trace = simulate(s)
    end = {e.action: e.end for e in trace.events}
    start = {e.action: e.start for e in trace.events}
    assert all(start[F(0, mb)] >= end[F(3, mb - 3)] for mb in range(3, 12))
    assert trace.makespan > simulate(make_schedule("inference", 2, 12, 2)).makespan  # the wait is real


def test_a_round_that_runs_before_its_tokens_is_refused_with_the_cycle():
    lists = ((F(0, 1), F(0, 0)), (F(1, 0), F(1, 1)))
    with pytest.raises(ScheduleError, match="deadlock: rank 0 waits for 1F0 .to run 0F1."):
        validate(Rounds("inference", 2, 2, 1, lists, (0, 1), per_round=1))
    with pytest.raises(ValueError, match="1f1b has a backward"):
        repeat(make_schedule("1f1b", 2, 2), 2)


# -- the executor, forward only -------------------------------------------------------------------
def test_generation_rounds_run_on_the_executor_with_the_token_fed_back():
    config = GenerateConfig(p=1, v=2, prompts=[[1, 2, 3], [4, 5, 6], [7, 8, 9]], microbatch=2, new_tokens=15)
    plan = prepare(config)
    work, s = plan.work, plan.schedule
    assert isinstance(s, Rounds) and s.per_round == 2 and s.n_stages == 2
    feed = TokenFeed(work, CPU, time.perf_counter, time.perf_counter(), None)
    fed = []

    def inputs(mb, *tokens):  # lazy: made when stage 0 runs the micro-batch
        fed.append((mb, [t.tolist() for t in tokens]))
        return feed.inputs(mb, *tokens)

    record = executor_of(plan).step(0, inputs, None, outputs=feed.outputs)
    assert [mb for mb, _ in fed] == list(range(s.m)) and all(not t for mb, t in fed[:2])
    assert all(t == [feed.kept[mb - 2]] for mb, t in fed[2:]), "stage 0 gets the last round's tokens, as fed"
    assert len(record.events) == 2 * s.m and record.waits == [] and record.loss is None
    seqs = torch.tensor(config.prompts)
    with torch.no_grad():  # past the 16-token window: the context is cut to the last 16
        for _ in range(config.new_tokens):
            seqs = torch.cat([seqs, whole(config)(seqs[:, -16:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    got = [[feed.kept[r * 2 + i // 2][i % 2] for r in range(config.new_tokens)] for i in range(3)]
    assert got == seqs[:, 3:].tolist()


def test_a_stream_on_the_executor_waits_for_its_requests_and_sinks_the_outputs():
    config = ServeConfig(model="mlp", p=1, v=3, requests=7, microbatch=2, rate=400)  # 2.5 ms apart
    plan = prepare(config)
    executor = executor_of(plan)
    t0 = time.perf_counter()
    feed = StreamFeed(plan.work, CPU, time.perf_counter, t0, None)
    record = executor.step(0, feed.inputs, None, outputs=feed.outputs)
    ready = config.stream.ready_ms()
    first = {a.mb: start for a, start, _ in record.events if a.stage == 0}
    assert all(first[mb] >= t0 + ready[mb] / 1000 for mb in range(4)), "a micro-batch ran before its requests came"
    with torch.no_grad():
        expected = whole(config)(plan.work.inputs)
    torch.testing.assert_close(torch.cat([feed.kept[mb] for mb in range(4)]), expected)


def test_training_keeps_its_own_path_on_the_same_executor():
    plan = prepare_run(RunConfig(p=1, v=2, schedule="interleaved", m=2, model_args={"depth": 3}))
    executor = executor_of(plan)
    x, y = task_of(plan.config).batch(0)
    record = executor.step(0, list(x.chunk(2)), list(y.chunk(2)))
    model = torch.nn.Sequential(*task_of(plan.config).layers())
    assert record.loss == pytest.approx(task_of(plan.config).loss(model(x), y).item(), rel=1e-5)


# -- one stage builder, one plan, one config vocabulary --------------------------------------------
def test_one_stage_builder_for_training_and_serving():
    trained = {k: v + 0.5 for k, v in whole(ServeConfig(model="mlp")).state_dict().items()}
    served = build_stages(
        prepare(ServeConfig(model="mlp", state=trained, p=2)), 1, task_of(ServeConfig(model="mlp")), CPU
    )
    training = build_stages(prepare_run(RunConfig(model="mlp", p=2)), 1, task_of(RunConfig(model="mlp")), CPU)
    assert served.keys() == training.keys() == {1}
    assert not served[1].module.training and training[1].module.training
    first = next(iter(served[1].module.state_dict()))
    index = int(first.split(".", 1)[0]) + prepare_run(RunConfig(model="mlp", p=2)).partition.bounds[1]
    name = f"{index}.{first.split('.', 1)[1]}"
    assert torch.equal(served[1].module.state_dict()[first], trained[name])  # the served weights
    assert not torch.equal(training[1].module.state_dict()[first], trained[name])  # the seed's


def test_serving_and_training_share_their_fields_and_their_checks():
    shared = {f.name for f in dataclasses.fields(EngineConfig)}
    for cls in (RunConfig, ServeConfig, GenerateConfig):
        assert shared <= {f.name for f in dataclasses.fields(cls)}
    assert {
        "message_order",
        "timeout",
        "startup_timeout",
        "device",
        "backend",
        "pin_cores",
        "threads",
        "oversubscribe",
    } <= shared
    assert prepare(ServeConfig(message_order="issue")).in_order and not prepare(ServeConfig()).in_order
    assert prepare(GenerateConfig(message_order="issue")).in_order
    for changes in (dict(message_order="fifo"), dict(threads=0), dict(startup_timeout=0.5), dict(device="tpu")):
        with pytest.raises(ValueError) as training:
            prepare_run(RunConfig(**changes))
        with pytest.raises(ValueError) as serving:
            prepare(ServeConfig(**changes))
        assert str(serving.value) == str(training.value), changes
