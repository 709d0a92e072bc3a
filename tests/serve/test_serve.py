"""Serving on real processes, against the whole model on one process: forward-only outputs for
every schedule shape, one request's latency against its compute, greedy generation token for
token, a worker killed mid-stream, and the terminal command. Each group of processes serves many
configurations (starting one costs seconds)."""

import os
import signal
import time

import pytest
import torch

from minipipe.engine.diagnosis import WorkerError
from minipipe.models import make_task
from minipipe.serve.api import GenerateConfig, ServeConfig, generate, prepare, serve, serve_many
from tests.support.processes import workers_alive

pytestmark = pytest.mark.distributed


def trained_gpt(steps: int = 80, **model_args) -> dict:
    """The course GPT trained a little on one process in plain torch, so generation has
    something to say (the weights' names are nn.Sequential(*task.layers())'s, as RunResult.state's)."""
    task = make_task("gpt", batch_size=32, **model_args)
    model = torch.nn.Sequential(*task.layers())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only fight the workers for the cores
    try:
        for step in range(steps):
            x, y = task.batch(step)
            opt.zero_grad()
            task.loss(model(x), y).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def whole_model(config):
    model = torch.nn.Sequential(*make_task(config.model, seed=config.seed, **config.model_args).layers())
    if config.state is not None:
        model.load_state_dict(config.state)
    return model.eval()


def greedy(model, prompts, new_tokens: int, block: int) -> list[list[int]]:
    """nanoGPT's generate, greedy: the last `block` tokens in, the most likely next token out."""
    seqs = torch.tensor(prompts)
    with torch.no_grad():
        for _ in range(new_tokens):
            seqs = torch.cat([seqs, model(seqs[:, -block:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seqs.tolist()


def check(config, result):
    label = f"{type(config).__name__} p={config.p} v={config.v} tp={config.tp} k={config.microbatch}"
    model, schedule = whole_model(config), result.trace.schedule
    assert result.trace.source == "measured" and schedule.forward_only, label
    assert sorted(e.action for e in result.trace.events) == sorted(a for acts in schedule.actions for a in acts), label
    assert result.trace.peak_inflight() == [0] * schedule.p, label
    if isinstance(config, GenerateConfig):
        block = make_task(config.model, **config.model_args).block
        assert result.sequences == greedy(model, result.prompts, config.new_tokens, block), label
        assert all(a < b for times in result.token_ms for a, b in zip(times, times[1:])), label
        return
    inputs = prepare(config).work.inputs[: config.stream.requests]
    with torch.no_grad():
        torch.testing.assert_close(
            result.outputs,
            model(inputs),
            rtol=1e-5,
            atol=1e-5,
            msg=lambda m: f"{label}: outputs differ from the whole model's: {m}",
        )
    assert all(d > a for a, d in zip(result.arrival_ms, result.done_ms)), label
    assert len(result.done_ms) == config.stream.requests and result.throughput > 0 and result.p99 >= result.p50


@pytest.fixture(scope="module")
def state():
    return trained_gpt()


@pytest.mark.timeout(300)
def test_two_ranks_every_shape_one_request_and_generation(state):
    gpt = dict(model="gpt", state=state, timeout=20)
    progressions = [[a, (a + d) % 32, (a + 2 * d) % 32] for a, d in ((1, 2), (5, 3), (0, 7), (30, 1))]
    configs = [
        ServeConfig(**gpt, p=2, requests=1, microbatch=1),  # one request alone
        ServeConfig(**gpt, p=2, v=3, requests=4, microbatch=4),  # one micro-batch through 6 stages
        ServeConfig(**gpt, p=2, requests=10, microbatch=3),  # m=4, the last padded
        ServeConfig(**gpt, p=2, requests=12, microbatch=4, rate=3000),
        ServeConfig(**gpt, p=2, v=2, requests=8, microbatch=2),  # interleaved, m a multiple of p
        ServeConfig(**gpt, p=2, v=2, requests=5, microbatch=2, rate=2000, arrivals="poisson"),  # m=3
        ServeConfig(model="mlp", p=2, requests=6, microbatch=2, timeout=20),
        GenerateConfig(**gpt, p=2, prompts=progressions, new_tokens=6, microbatch=1),
        GenerateConfig(
            **gpt, p=2, v=2, prompts=[list(range(i, i + 12)) for i in (0, 3, 9)], new_tokens=8, microbatch=2
        ),  # past the 16-token window
    ]
    events = []
    results = serve_many(configs, progress=events.append)
    for config, result in zip(configs, results):
        check(config, result)
    for result in results[:2]:  # a request walks through every stage: its latency is at least their compute
        for i in range(result.stream.requests):
            assert result.latency_ms[i] >= result.compute_ms(i) > 0
            assert len({e.action.stage for e in result.trace.events}) == result.trace.schedule.n_stages
    assert results[7].sequences[0][:5] == [1, 3, 5, 7, 9], "the trained model continues a progression"
    served = [e for e in events if e["kind"] == "served"]
    assert sorted((e["job"], e["mb"]) for e in served) == [
        (j, mb) for j, c in enumerate(configs[:7]) for mb in range(c.stream.n_microbatches)
    ]
    tokens = [e for e in events if e["kind"] == "token" and e["job"] == 7]
    assert [(e["round"], e["sequences"]) for e in tokens] == [(r, [j]) for r in range(6) for j in range(4)]


@pytest.mark.timeout(300)
def test_four_ranks_pipeline_and_tensor_parallel(state):
    deeper = dict(model="gpt", model_args={"depth": 6}, timeout=30)
    configs = [
        ServeConfig(model="gpt", state=state, p=4, requests=9, microbatch=2, timeout=30),  # m=5
        ServeConfig(**deeper, p=4, v=2, requests=8, microbatch=2),  # 8 stages
        ServeConfig(**deeper, p=4, v=2, requests=6, microbatch=1),  # m=6: a last group of 2
        ServeConfig(model="gpt", state=state, p=2, tp=2, requests=7, microbatch=2, timeout=30),
        ServeConfig(model="mlp", p=1, tp=4, requests=5, microbatch=2, timeout=30),
        GenerateConfig(model="gpt", state=state, p=2, tp=2, prompts=[[2, 4, 6], [3, 6, 9]], new_tokens=5, timeout=30),
    ]
    for config, result in zip(configs, serve_many(configs)):
        check(config, result)


@pytest.mark.timeout(300)
def test_message_order_issue_takes_effect_on_streams_and_generation(state):
    """NCCL's in-order message matching, run on gloo (message_order="issue", as training's test
    does): the stream's activations and generation's fed-back tokens share one agreed order per
    pair of ranks, and the answers stay the whole model's."""
    gpt = dict(model="gpt", state=state, timeout=20)
    configs = [
        ServeConfig(**gpt, p=2, v=2, requests=8, microbatch=2, message_order="issue"),
        GenerateConfig(
            **gpt, p=2, v=2, prompts=[[1, 3, 5], [2, 4, 6], [0, 7, 14]], new_tokens=6, message_order="issue"
        ),
        GenerateConfig(**gpt, p=2, prompts=[[1, 3, 5], [2, 4, 6]], new_tokens=4, microbatch=2),
    ]
    results = serve_many(configs)
    for config, result in zip(configs, results):
        check(config, result)
    assert [r.trace.meta["in_order"] for r in results] == [True, True, False]  # what the executors ran with


@pytest.mark.timeout(120)
def test_a_rank_that_stops_responding_while_generating_is_named_with_its_action():
    """The token fed back is a message like any other: stage 0's wait for it times out with the
    executor's own error, and the rank that stopped is blamed, at its action."""
    config = GenerateConfig(
        p=2,
        prompts=[[1, 2, 3], [4, 5, 6]],
        new_tokens=4,
        timeout=2,
        fault={"rank": 1, "action": "1F3", "kind": "sleep", "seconds": 60},
    )
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        generate(config)
    assert (info.value.rank, info.value.action) == (1, "1F3") and "stopped responding" in str(info.value)
    assert "waiting for 1F3 from rank 1 (to run 0F5)" in str(info.value) and time.monotonic() - start < 60
    assert workers_alive() == set()


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_stream_is_reported_and_nothing_is_left():
    pids, served = [], []

    def progress(event):
        if event["kind"] == "started":
            pids.extend(event["pids"])
        elif event["kind"] == "served":
            served.append(event["mb"])
            if len(served) == 2:
                os.kill(pids[1], signal.SIGKILL)

    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        serve(ServeConfig(p=2, requests=400, microbatch=1, rate=100, timeout=5), progress=progress)
    assert info.value.rank == 1 and "killed by signal 9" in str(info.value)
    assert len(served) < 100 and time.monotonic() - start < 60
    deadline = time.monotonic() + 5
    while workers_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers_alive() == set(), "a worker process outlived the failed stream"


@pytest.mark.timeout(180)
def test_the_terminal_command(tmp_path, capsys):
    from minipipe.cli import main

    trace = tmp_path / "serve.json"
    assert (
        main(["serve", "-p", "1", "--requests", "8", "--microbatch", "4", "--rate", "4000", "--trace", str(trace)]) == 0
    )
    out = capsys.readouterr().out
    assert "measured 1 process: 8 requests, 4000/s (even), micro-batches of 4" in out
    assert "simulated (costs fitted on this run) 1 process" in out and "p99" in out and trace.exists()
    assert (
        main(
            [
                "serve",
                "-p",
                "1",
                "--generate",
                "--train-steps",
                "0",
                "--prompt",
                "1,2,3",
                "--prompt",
                "4,5,6",
                "--new-tokens",
                "3",
                "--trace",
                str(trace),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count(" ms  token ") == 6 and "generated 2 × 3 tokens, p=1" in out and "1 2 3 | " in out
