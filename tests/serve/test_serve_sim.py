"""Serving without processes: the forward-only schedule kind, the simulated request stream, the
serving figure, and every bad input refused before a process starts."""

import math

import plotly.graph_objects as go
import pytest
import torch

from minipipe import Action, RunConfig, make_schedule, simulate, theory
from minipipe.serve.api import GenerateConfig, ServeConfig, prepare, serve_many
from minipipe.sim.request_stream import ServeCosts, Stream, simulate_serving, stage_times
from minipipe.trace import Event, Trace, Wait
from minipipe.viz import memory, timeline
from minipipe.viz.latency_throughput import latency_throughput


# -- the kind ---------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("v", [1, 2, 3])
def test_inference_runs_every_forward_once_and_nothing_else(p, v):
    for m in range(1, 9):
        s = make_schedule("inference", p, m, v)
        assert s.forward_only and s.v == v
        for rank, acts in enumerate(s.actions):
            assert sorted(acts) == sorted(Action("F", st, mb) for st in s.stages_of(rank) for mb in range(m))
        trace = simulate(s)
        assert trace.peak_inflight() == [theory.peak_inflight("inference", p, m, r, v) for r in range(p)] == [0] * p
        if v == 1 or m % p == 0:  # the bubble of the forward pipeline: (p-1)/(v·m+p-1)
            assert trace.bubble() == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)
            assert trace.makespan == pytest.approx(m + (p - 1) / v)


def test_a_forward_only_trace_draws_and_holds_nothing():
    trace = simulate(make_schedule("inference", 3, 4, 2))
    assert all(trace.inflight_curve(r) == [(trace.start, 0)] for r in range(3))
    text = timeline(trace).layout.title.text
    assert "forward only: nothing kept for a backward" in text and "peak in-flight" not in text
    go.Figure(memory(trace).to_dict())  # plotly validates it
    assert "peak in-flight 0" in trace.summary()


def test_serving_a_stream_that_is_not_a_stream_names_what_was_given():
    with pytest.raises(ValueError, match="expected a Stream, got tuple"):
        simulate_serving((8, 2), ServeCosts(), p=2)


def test_training_refuses_a_forward_only_schedule():
    from minipipe.engine.config import prepare as prepare_run

    with pytest.raises(ValueError, match="inference schedule is forward only: it serves"):
        prepare_run(RunConfig(schedule="inference", p=2, m=4))


# -- the simulated stream ---------------------------------------------------------------------
def test_one_request_walks_through_every_stage_and_every_message():
    costs = ServeCosts(per_request=4.0, fixed=2.0, latency=0.25)
    for p, v in ((1, 1), (2, 1), (4, 1), (2, 2), (3, 3)):
        one = simulate_serving(Stream(requests=1, microbatch=1), costs, p=p, v=v)
        crossings = p * v - 1  # round robin: every boundary is between two ranks
        assert one.latency_ms == [pytest.approx(6.0 + crossings * 0.25)]
        assert one.compute_ms(0) == pytest.approx(6.0)
        charged = one.trace.costs  # the trace says what the simulator charged: each stage, each message
        assert (charged.forward, charged.latency) == (pytest.approx([6.0 / (p * v)] * (p * v)), 0.25)


def test_a_pipeline_raises_throughput_not_one_requests_latency():
    costs = ServeCosts(per_request=1.0, fixed=0.5)
    stream = Stream(requests=64, microbatch=4)
    one, two, four = (simulate_serving(stream, costs, p=p) for p in (1, 2, 4))
    assert one.throughput < two.throughput < four.throughput
    assert four.throughput / one.throughput == pytest.approx(4 * 16 / (16 + 3))  # m=16: fill and drain
    alone = [simulate_serving(Stream(1, 1), costs, p=p).p50 for p in (1, 2, 4)]
    assert alone == [pytest.approx(alone[0])] * 3


def test_bigger_microbatches_wait_longer_at_a_low_rate():
    costs = ServeCosts(per_request=0.1, fixed=1.0)
    by_k = [simulate_serving(Stream(64, k, rate=200), costs, p=2) for k in (1, 4, 16)]
    assert by_k[0].p50 < by_k[1].p50 < by_k[2].p50  # waiting for the micro-batch to fill
    flood = [simulate_serving(Stream(64, k), costs, p=2) for k in (1, 4, 16)]
    assert flood[0].throughput < flood[1].throughput < flood[2].throughput  # the fixed cost spread out


def test_arrivals_and_microbatches():
    even = Stream(requests=5, microbatch=2, rate=1000)
    assert even.arrival_ms() == pytest.approx([0, 1, 2, 3, 4])
    assert even.ready_ms() == pytest.approx([1, 3, 4]) and list(even.members(2)) == [4]
    poisson = Stream(requests=4000, microbatch=8, rate=500, arrivals="poisson", seed=3)
    gaps = [b - a for a, b in zip(poisson.arrival_ms(), poisson.arrival_ms()[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(2.0, rel=0.05) and min(gaps) < 0.2 < 6 < max(gaps)
    assert Stream(3, 2).arrival_ms() == [0, 0, 0]
    sim = simulate_serving(Stream(3, 2, rate=100), ServeCosts(per_request=1), p=1)
    assert sim.done_ms == pytest.approx([12, 12, 22])  # micro-batch 1 is ready at 20 ms
    assert sim.latency_ms == pytest.approx([12, 2, 2])
    assert sim.percentile(0) == sim.p50 == pytest.approx(2) and sim.percentile(100) == pytest.approx(12)
    assert sim.percentile(75) == pytest.approx(7)


def measured_run(k: int, stage_ms: list[float], latency: float = 0.5, n: int = 3, rate: float | None = None):
    """A measured run of n micro-batches of k requests (arriving at `rate` a second, or all at once):
    stage s computes for stage_ms[s] − 0.2 ms and then hands its output on for 0.2 ms; a message takes
    `latency`."""
    from minipipe.sim.request_stream import result_of

    p, stream = len(stage_ms), Stream(requests=n * k, microbatch=k, rate=rate)
    schedule, ready = make_schedule("inference", p, n), stream.ready_ms()
    events, waits, ends = [], [], [0.0] * n
    for s, ms in enumerate(stage_ms):
        free = 0.0
        for mb in range(n):
            start = max(free, ready[mb]) if s == 0 else max(free, ends[mb] + latency)
            if s > 0:
                waits.append(Wait(s, "recv", Action("F", s - 1, mb), free, start, 0))
            events.append(Event(s, Action("F", s, mb), start, start + ms - 0.2))
            ends[mb], free = start + ms - 0.2, start + ms
    trace = Trace(schedule, events, source="measured", waits=waits)
    return result_of(stream, trace, p=p, v=1)


def test_a_stage_waiting_for_its_requests_is_not_timed_for_it():
    """Requests arriving 1 ms apart, 4 to a micro-batch, into stages of 0.8 and 0.4 ms: stage 0 idles
    between micro-batches, and that idling is the stream's, not the stage's. (Stage 0's 0.2 ms of handing
    on falls inside that wait, where a trace cannot tell the two apart: its compute alone is counted.)"""
    slow = measured_run(4, [0.8, 0.4], rate=1000.0, n=4)
    assert slow.trace.rank_events(0)[1].start - slow.trace.rank_events(0)[0].end > 3  # it idled
    assert stage_times(slow) == pytest.approx([0.6, 0.4])


@pytest.mark.parametrize(("p", "v"), [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_a_simulated_stream_predicted_with_its_own_costs_is_itself(p, v):
    costs = ServeCosts(per_request=0.5, fixed=1.0, latency=0.1)
    sim = simulate_serving(Stream(requests=12, microbatch=2, rate=800), costs, p=p, v=v)
    again = sim.predicted(costs)
    assert (again.p, again.v, again.trace.schedule.v) == (p, v, v)
    assert again.done_ms == pytest.approx(sim.done_ms) and again.arrival_ms == sim.arrival_ms


def test_costs_fitted_on_a_measured_trace_replay_it():
    """A measured run whose stages compute for 3 and 1 ms, each rank busy 0.2 ms more after every
    forward (handing it on), and messages that take 0.5 ms: the fitted costs put the overhead into
    the stages and find the message latency."""
    from minipipe.sim.request_stream import result_of

    measured = measured_run(1, [3.2, 1.2], latency=0.5)
    stream, traced = measured.stream, measured.trace
    assert stage_times(measured) == pytest.approx([3.2, 1.2])
    assert measured.label == "pipeline p=2" and measured.done_ms == pytest.approx([4.5, 7.7, 10.9])
    assert result_of(stream, traced, p=2, v=1, tp=2, meta={"run": 1}).label == "pipeline p=2 × tensor tp=2"
    assert result_of(stream, traced, p=2, v=1, meta={"run": 1}).meta == {"run": 1}
    costs = ServeCosts.fit(measured)
    assert costs.per_request == pytest.approx(4.4) and costs.stage_share == pytest.approx((3.2 / 4.4, 1.2 / 4.4))
    assert costs.latency == pytest.approx(0.5) and costs.fixed == 0
    predicted = measured.predicted()
    assert predicted.source == "simulated" and predicted.done_ms[0] == pytest.approx(3.2 + 0.5 + 1.2)
    with pytest.raises(ValueError, match="stage_share has 2 stages but the pipeline has 4"):
        simulate_serving(stream, costs, p=4)
    assert simulate_serving(stream, costs.even(), p=4).done_ms[0] == pytest.approx(4.4 + 3 * 0.5)


def test_serving_costs_fitted_on_runs_of_several_sizes_are_the_line_through_them():
    """Runs of k = 1, 2, 4 whose stages take 1 + 2k and 0.5 + k ms: fixed 1.5, 3 a request, and each
    stage's mean share; a line that would cross below zero (3k − 1) is taken through zero instead, and
    runs of different stage counts give no shares."""
    runs = [measured_run(k, [1 + 2 * k, 0.5 + k], latency=0.25 * k) for k in (1, 2, 4)]
    assert [stage_times(r) for r in runs] == [pytest.approx([1 + 2 * k, 0.5 + k]) for k in (1, 2, 4)]
    costs = ServeCosts.fit(runs)
    assert costs.fixed == pytest.approx(1.5) and costs.per_request == pytest.approx(3.0)
    shares = [(1 + 2 * k) / (1.5 + 3 * k) for k in (1, 2, 4)]
    assert costs.stage_share == pytest.approx((sum(shares) / 3, 1 - sum(shares) / 3))
    assert costs.latency == pytest.approx(0.5)  # the median of the runs' 0.25, 0.5 and 1.0
    steep = ServeCosts.fit([measured_run(k, [3 * k - 1]) for k in (1, 2, 4)])
    assert steep.fixed == 0 and steep.per_request == pytest.approx((2 + 5 + 11) / 7)
    mixed = ServeCosts.fit([measured_run(1, [3.0]), measured_run(2, [2.5, 2.5])])
    assert mixed.stage_share is None and mixed.fixed == pytest.approx(1.0) and mixed.per_request == pytest.approx(2.0)


def test_the_latency_throughput_figure():
    costs = ServeCosts(per_request=0.3, fixed=1.0, latency=0.1)
    results = [simulate_serving(Stream(32, k, rate=3000), costs, p=p) for p in (1, 2) for k in (1, 4, 8)]
    fig = latency_throughput(results)
    go.Figure(fig.to_dict())
    assert [t.name for t in fig.data] == ["1 process · simulated", "pipeline p=2 · simulated"]
    for line, group in zip(fig.data, (results[:3], results[3:])):
        assert list(line.x) == pytest.approx([r.throughput for r in group])
        assert list(line.y) == pytest.approx([r.p50 for r in group])
        assert list(line.error_y.array) == pytest.approx([r.p99 - r.p50 for r in group])
        assert list(line.text) == ["k=1", "k=4", "k=8"] and line.marker.symbol == "circle-open"
    with pytest.raises(ValueError, match="at least one"):
        latency_throughput([])


# -- bad input: a ValueError, and no process started ------------------------------------------
@pytest.fixture
def no_processes(monkeypatch):
    import minipipe.engine.workers

    def refuse(*args, **kwargs):
        raise AssertionError("a process was started for a config that should have been refused")

    monkeypatch.setattr(minipipe.engine.workers, "launch", refuse)


BAD = [
    (ServeConfig(microbatch=0), "microbatch \\(requests per micro-batch\\) must be a whole number >= 1, got 0"),
    (ServeConfig(rate=0), "rate is requests per second and must be > 0"),
    (ServeConfig(rate=-5.0), "rate is requests per second and must be > 0"),
    (ServeConfig(arrivals="bursty"), "unknown arrivals 'bursty'"),
    (ServeConfig(requests=0), "requests must be a whole number >= 1"),
    (ServeConfig(rate=0.5, microbatch=64, timeout=10), "micro-batch 0 waits 62 s for its 32 requests"),
    (ServeConfig(inputs=torch.zeros(3, 17, dtype=torch.long)), "17 tokens long, longer than the model's context of 16"),
    (ServeConfig(inputs=torch.full((2, 4), 32)), "the token 32, which is not in the vocabulary: tokens are 0..31"),
    (ServeConfig(model="mlp", inputs=torch.zeros(3, 5)), "shape \\(n, 64\\) of torch.float32"),
    (ServeConfig(schedule="1f1b"), "1f1b has a backward"),
    (ServeConfig(p=7), "p\\*v = 7\\*1 = 7 stages but the model has only 6 layers"),
    (ServeConfig(tp=3), "tp=3 must divide"),
    (ServeConfig(state={"0.tok.weight": torch.zeros(2, 2)}), "state does not fit this model"),
    (GenerateConfig(prompts=[[1] * 17]), "prompts are 17 tokens long, longer than the model's context of 16"),
    (GenerateConfig(prompts=[[1, 2, 99]]), "the token 99, which is not in the vocabulary"),
    (GenerateConfig(prompts=[[1, -1]]), "the token -1, which is not in the vocabulary"),
    (GenerateConfig(prompts=[[1, 2], [3]]), "one length \\(the model has no padding mask\\)"),
    (GenerateConfig(prompts=[[1.5, 2]]), "token ids"),
    (GenerateConfig(new_tokens=0), "new_tokens must be a whole number >= 1"),
    (GenerateConfig(microbatch=0), "microbatch \\(sequences per micro-batch\\) must be a whole number >= 1"),
    (GenerateConfig(model="mlp"), "generation needs a language model"),
    (GenerateConfig(timeout=0), "timeout must be at least"),
]


# ids without the patterns' backslashes: pytest escapes a backslash in an id each time it collects, so in one
# process (mutmut's runs) the second collection's ids no longer match the first's
@pytest.mark.parametrize("config,message", BAD, ids=[m[:40].replace("\\", "") for _, m in BAD])
def test_bad_input_is_refused_before_any_process_starts(no_processes, config, message):
    with pytest.raises(ValueError, match=message):
        serve_many([config])


def test_bad_input_in_the_terminal_exits_with_code_2(capsys):
    from minipipe.cli import main

    for argv, message in (
        (["serve", "--microbatch", "0"], "microbatch"),
        (["serve", "--rate", "0"], "rate"),
        (["serve", "--generate", "--prompt", "1,2,x"], "token ids separated by commas"),
        (["serve", "--generate", "--prompt", "1,2,32"], "not in the vocabulary"),
    ):
        assert main(argv) == 2
        assert message in capsys.readouterr().err


def test_a_good_plan():
    plan = prepare(ServeConfig(p=2, v=2, requests=7, microbatch=3))
    assert plan.schedule.kind == "inference" and (plan.schedule.p, plan.schedule.m, plan.schedule.v) == (2, 3, 2)
    assert plan.work.inputs.shape == (9, 16) and torch.equal(
        plan.work.inputs[7], plan.work.inputs[6]
    )  # padded with the last
    assert [shape for shape, _ in plan.shapes] == [(3, 16, 32)] * 3 + [(3, 16, 32)]
    gen = prepare(GenerateConfig(p=2, prompts=[[1, 2, 3]] * 3, microbatch=2, new_tokens=15))
    assert (
        gen.schedule.m == 2 * 15 and gen.work.sequences == 3 and sorted(gen.work.shapes_by_length) == list(range(3, 17))
    )
    assert math.isclose(sum(ServeCosts(stage_share=(0.25, 0.75)).stage_ms(4, 2)), 4.0)
