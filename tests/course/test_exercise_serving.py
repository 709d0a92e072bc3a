"""Exercise 14 (serve a stream, generate token by token): typical wrong answers are refused with
the message that names the mistake, and the engine's own answer, in several disguises, with the
message that names the engine (in a watched sandbox, as when graded). No worker process starts: the
checker judges on the cost model."""

import importlib

import pytest

from minipipe import make_schedule
from minipipe.course.exercises import WrongAnswer, check_serving
from minipipe.schedule.ops import B, F
from minipipe.schedule.rounds import repeat
from tests.support.judged import direct, sandboxed


def wrong(*answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check_serving, *answer)
    return " ".join(str(info.value).split())


def refused(*answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check_serving, *answer)
    return " ".join(str(info.value).split())


# the reference answers (as in the solution), to vary one at a time
def rounds_in_order(p, per_round, rounds):
    return [[F(r, t * per_round + j) for t in range(rounds) for j in range(per_round)] for r in range(p)]


def pipelined(arrival_ms, k, stage_ms, latency):
    n = len(arrival_ms)
    ready = [arrival_ms[min((j + 1) * k, n) - 1] for j in range(-(-n // k))]
    free, done = [0.0] * len(stage_ms), []
    for t in ready:
        for s, cost in enumerate(stage_ms):
            t = max(t + (latency if s else 0.0), free[s]) + cost
            free[s] = t
        done.append(t)
    return [done[i // k] for i in range(n)]


def slowest_stage(k, stage_ms):
    return 1000 * k / max(stage_ms)


@pytest.mark.distributed  # through the grader, as the check cell in JupyterLab calls it
def test_the_reference_answers_pass(capsys):
    check_serving(rounds_in_order, pipelined, slowest_stage)
    assert "✓ 4/4 checks passed" in capsys.readouterr().out


# -- generation's rounds ---------------------------------------------------------------------------
def test_rounds_numbered_from_zero_each_time_are_named():
    def same_numbers(p, per_round, rounds):
        return [[F(r, j) for _ in range(rounds) for j in range(per_round)] for r in range(p)]

    text = wrong(same_numbers, pipelined, slowest_stage)
    assert "appears twice" in text and "micro-batch j of round t is t·per_round + j" in text


def test_a_rank_that_runs_ahead_of_its_tokens_shows_the_deadlock():
    def rank_0_by_sequence(p, per_round, rounds):
        out = rounds_in_order(p, per_round, rounds)
        out[0] = [F(0, t * per_round + j) for j in range(per_round) for t in range(rounds)]
        return out

    text = wrong(rank_0_by_sequence, pipelined, slowest_stage)
    assert "deadlock" in text and "every rank takes the rounds in order" in text


def test_one_sequence_at_a_time_is_valid_but_slow():
    def by_sequence(p, per_round, rounds):
        return [[F(r, t * per_round + j) for j in range(per_round) for t in range(rounds)] for r in range(p)]

    text = wrong(by_sequence, pipelined, slowest_stage)
    assert "1/4 checks passed" in text and "Each micro-batch goes through all its rounds before the next" in text


def test_a_backward_in_generation_is_refused():
    def with_backward(p, per_round, rounds):
        return [row + [B(r, 0)] for r, row in enumerate(rounds_in_order(p, per_round, rounds))]

    assert "generation runs forward only" in wrong(with_backward, pipelined, slowest_stage)


ROUNDS_DISGUISES = {
    "repeat of the inference schedule": lambda p, k, n: [
        list(row) for row in repeat(make_schedule("inference", p, k), n).actions
    ],
    "the generator, by another path": lambda p, k, n: [
        [a._replace(mb=t * k + a.mb) for t in range(n) for a in row]
        for row in importlib.import_module("minipipe.schedule.generators").inference(p, k).actions
    ],
    "the registry's generator": lambda p, k, n: [
        [a._replace(mb=t * k + a.mb) for t in range(n) for a in row]
        for row in importlib.import_module("minipipe.schedule.kinds").KINDS["inference"].generate(p, k).actions
    ],
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", ROUNDS_DISGUISES)
def test_the_engines_rounds_are_refused(disguise):
    text = refused(ROUNDS_DISGUISES[disguise], pipelined, slowest_stage)
    assert "0/4 checks passed" in text and "calls" in text and "write the rounds yourself" in text


# -- each request's result time ---------------------------------------------------------------------
def _times(mistake):
    text = wrong(rounds_in_order, mistake, slowest_stage)
    assert "2/4 checks passed" in text and "the simulator says" in text
    return text


def test_latencies_instead_of_done_times_are_named():
    def latencies(arrival_ms, k, stage_ms, latency):
        return [d - a for d, a in zip(pipelined(arrival_ms, k, stage_ms, latency), arrival_ms)]

    assert "Those are the requests' latencies" in _times(latencies)


def test_ignoring_arrivals_is_named():
    def all_at_zero(arrival_ms, k, stage_ms, latency):
        return pipelined([0.0] * len(arrival_ms), k, stage_ms, latency)

    assert "only once its last request has arrived" in _times(all_at_zero)


def test_starting_at_the_first_arrival_is_named():
    def first_arrival(arrival_ms, k, stage_ms, latency):
        firsts = [arrival_ms[(i // k) * k] for i in range(len(arrival_ms))]
        return pipelined(firsts, k, stage_ms, latency)

    assert "when its first request arrives" in _times(first_arrival)


def test_free_messages_are_named():
    def no_messages(arrival_ms, k, stage_ms, latency):
        return pipelined(arrival_ms, k, stage_ms, 0.0)

    text = _times(no_messages)
    assert "stages [1.0, 2.0] ms, 0.25 ms a message:" in text  # the case: 2 stages, so 1 boundary
    assert (
        "That leaves out the messages: a micro-batch's activation takes 0.25 ms to cross each of the p − 1 = 1 "
        "boundaries between ranks on its way."
    ) in text


def test_one_micro_batch_at_a_time_is_named():
    def serial(arrival_ms, k, stage_ms, latency):
        return pipelined(arrival_ms, k, [sum(stage_ms) + (len(stage_ms) - 1) * latency], 0.0)

    assert "one micro-batch at a time through the whole pipeline" in _times(serial)


def test_every_stage_taken_as_slow_as_the_first_fails_on_the_uneven_fixed_case():
    """Even stages pass whatever cost is taken for them; the fixed case [0.5, 1.5, 1.0] is there for the
    answer that takes stage 0's cost for every stage."""

    def first_stage_paces(arrival_ms, k, stage_ms, latency):
        return pipelined(arrival_ms, k, [stage_ms[0]] * len(stage_ms), latency)

    text = _times(first_stage_paces)
    assert (
        "10 requests arriving 2000/s (even), micro-batches of k=4, stages [0.5, 1.5, 1.0] ms, 0 ms a message:" in text
    )


def test_times_that_are_not_a_list_of_numbers_are_refused():
    text = wrong(rounds_in_order, lambda arrival_ms, k, stage_ms, latency: len(arrival_ms), slowest_stage)
    assert "[1.0, 1.0], 0) returned int 8; return a list with one time (ms) per request" in text


def test_one_time_per_micro_batch_is_refused():
    def per_microbatch(arrival_ms, k, stage_ms, latency):
        return pipelined(arrival_ms, k, stage_ms, latency)[::k]

    assert "(one per micro-batch?)" in wrong(rounds_in_order, per_microbatch, slowest_stage)


def _simulator(arrival_ms, k, stage_ms, latency):
    from minipipe.sim.request_stream import ServeCosts, Stream, simulate_serving

    whole = sum(stage_ms)
    return simulate_serving(Stream(len(arrival_ms), k), ServeCosts(fixed=whole, latency=latency), len(stage_ms)).done_ms


def _replayed(arrival_ms, k, stage_ms, latency):
    from minipipe import Schedule

    replay = importlib.import_module("minipipe.schedule.replay").replay
    n, p = len(arrival_ms), len(stage_ms)
    m = -(-n // k)
    s = Schedule.build("mine", p, m, 1, [[F(r, mb) for mb in range(m)] for r in range(p)])
    return [end for _, end in replay(s, lambda r, a: stage_ms[a.stage])[-1] for _ in range(k)][:n]


def _ready_from_the_stream(arrival_ms, k, stage_ms, latency):
    from minipipe.sim import request_stream

    ready = request_stream.Stream(len(arrival_ms), k).ready_ms()
    return pipelined(ready, 1, stage_ms, latency)


TIMES_DISGUISES = {
    "the serving simulator": (_simulator, "calls the engine's serving simulator and its stream"),
    "the replay, by another path": (_replayed, "calls the engine's Schedule"),  # made first, to replay
    "the stream's ready times": (_ready_from_the_stream, "calls the engine's serving simulator and its stream"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", TIMES_DISGUISES)
def test_the_engines_times_are_refused(disguise):
    fn, message = TIMES_DISGUISES[disguise]
    text = refused(rounds_in_order, fn, slowest_stage)
    assert "2/4 checks passed" in text and message in text and "work the times out" in text


# -- peak throughput -----------------------------------------------------------------------------------
PEAK_MISTAKES = {
    "one micro-batch at a time": (lambda k, s: 1000 * k / sum(s), "That is one micro-batch at a time"),
    "even stages assumed": (lambda k, s: 1000 * k * len(s) / sum(s), "the slowest stage takes one micro-batch"),
    "micro-batches, not requests": (lambda k, s: 1000 / max(s), "each micro-batch holds k=4 requests"),
    "per ms": (lambda k, s: k / max(s), "That is requests per ms"),
    "text, not a number": (
        lambda k, s: f"{1000 * k / max(s):.0f}",
        "<lambda>(4, [1.0, 2.5, 1.5]) returned str '1600'; return a number",
    ),
    "True, not a number": (lambda k, s: True, "<lambda>(4, [1.0, 2.5, 1.5]) returned bool True; return a number"),
}


@pytest.mark.parametrize("mistake", PEAK_MISTAKES)
def test_peak_throughput_mistakes_are_named(mistake):
    fn, message = PEAK_MISTAKES[mistake]
    text = wrong(rounds_in_order, pipelined, fn)
    assert "3/4 checks passed" in text and message in text


@pytest.mark.distributed
def test_the_simulated_throughput_is_refused():
    def simulated(k, stage_ms):
        from minipipe.sim.request_stream import ServeCosts, Stream, simulate_serving

        return simulate_serving(Stream(100 * k, k), ServeCosts(fixed=sum(stage_ms)), len(stage_ms)).throughput

    text = refused(rounds_in_order, pipelined, simulated)
    assert "3/4 checks passed" in text and "the engine's" in text


def test_14_every_drawn_case_is_one_a_schedule_may_have():
    # the large drawn case once reached p·m = 78,624 stage micro-batches (p=32, m=2,457), over what a
    # schedule may hold, and the check crashed with the engine's limit instead of judging the answer
    import random

    from minipipe.course.exercises.serving import order_cases
    from minipipe.schedule.ir import MAX_CELLS

    largest = max(
        p * per_round * rounds for seed in range(3000) for p, per_round, rounds in order_cases(random.Random(seed))
    )
    assert MAX_CELLS // 2 < largest <= MAX_CELLS
