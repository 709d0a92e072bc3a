"""Exercise 14: serve a stream, generate token by token. The learner writes greedy generation's
rounds as action lists (`generation_order(p, per_round, rounds)`), when each request of a stream
gets its result (`done_times(arrival_ms, k, stage_ms, latency)`), and the throughput a pipeline
reaches when requests never run out (`peak_throughput(k, stage_ms)`).

The rounds are judged by properties: the validator, with the token fed back from the last stage
to stage 0 (schedule/rounds.py's Rounds), and a step no slower than all of a round's micro-batches
in flight. The times are judged against the engine's serving simulator (sim/request_stream.py) on
streams drawn afresh at every check, with uneven stages and a cost per message. While the
learner's code runs, the engine's schedules, simulators, stream and serving model refuse to
answer (guard.py)."""

from __future__ import annotations

import numbers
import random

from ...schedule.ir import MAX_CELLS
from ...schedule.kinds import make_schedule
from ...schedule.ops import F
from ...schedule.rounds import Rounds, repeat
from ...schedule.validate import ScheduleError, validate
from ...sim.costs import Costs
from ...sim.pipeline import simulate
from ...sim.request_stream import Stream
from ..i18n.messages import say as _
from .guard import ask
from .schedules import out_of_order, plain_lists
from .serving_times import simulated, stream_hint
from .verdict import Mistake, close, verdict

# what the learner's code may call while the check calls it (grading/watch.py): the actions (their cells
# may try anything of minipipe's: the check's streams are drawn when it runs)
ALLOWED = ("minipipe.schedule.ops",)


def _order_advice() -> str:
    return _("write the rounds yourself (F and the lists are yours to use)")


def _times_advice() -> str:
    return _("work the times out from the arrivals and the stage times yourself — the simulator will check them")


UNIT = Costs(forward=1.0, backward=0.0)  # every stage's forward one time unit: the rounds' pace


# -- generation's rounds ---------------------------------------------------------------------------
def order_cases(rng: random.Random) -> list[tuple[int, int, int]]:
    """(p, per_round, rounds): a few typical ones first, then drawn, one larger than a table holds."""
    fixed = [(2, 2, 3), (3, 1, 4), (3, 5, 2), (4, 2, 3), (1, 3, 2)]
    drawn = [(rng.randint(2, 6), rng.randint(1, 8), rng.randint(2, 6)) for _n in range(4)]
    # p from 13: past any table of the small cases' sizes (from 7, a table of p <= 12, per_round <= 24,
    # rounds <= 12 answered it about once in fifty)
    p, per_round = rng.randint(13, 32), rng.randint(8, 64)
    rounds = min(rng.randint(5, 40), MAX_CELLS // (p * per_round))  # p·m within what a schedule may hold
    return fixed + drawn + [(p, per_round, rounds)]


def _rounds(fn, p: int, per_round: int, rounds: int) -> Rounds:
    called = fn.__name__ if hasattr(fn, "__name__") else _("your function")
    name = f"{called}({p}, {per_round}, {rounds})"
    rows = ask(
        fn, p, per_round, rounds, name=name, advice=_order_advice(), take=lambda value: plain_lists(value, name, p)
    )
    backward = next((a for row in rows for a in row if a.op != "F"), None)
    if backward is not None:
        raise Mistake(
            _(
                "{name} holds {backward}: generation runs forward only (no loss, no backward, no optimizer); "
                "each round is one forward of every micro-batch on every stage",
                name=name,
                backward=backward,
            )
        )
    lists = tuple(tuple(row) for row in rows)
    return Rounds("yours", p, per_round * rounds, 1, lists, tuple(range(p)), per_round=per_round)


def _shown(s: Rounds) -> str:
    return f"p={s.p}, per_round={s.per_round}, rounds={s.rounds}"


def _check_valid(fn, cases) -> str:
    for case in cases:
        s = _rounds(fn, *case)
        try:
            validate(s)
        except ScheduleError as e:
            hint, done = "", [a for row in s.actions for a in row]
            if len(set(done)) < len(done) or any(a.mb >= s.m for a in done):
                hint = "\n" + _(
                    "Number the micro-batches on: micro-batch j of round t is t·per_round + j, so the "
                    "{rounds} rounds hold micro-batches 0..{last}.",
                    rounds=s.rounds,
                    last=s.m - 1,
                )
            elif sorted(done) == sorted(F(r, mb) for r in range(s.p) for mb in range(s.m)) and all(
                a.stage == r for r, row in enumerate(s.actions) for a in row
            ):
                hint = "\n" + _(
                    "Every forward is there, on its rank, in an order that cannot run: stage 0 can start a "
                    "micro-batch's next round only once the last stage has picked its token, so every rank takes "
                    "the rounds in order."
                )
            raise Mistake(
                _(
                    "at {shown} the validator (with each token fed back from the last stage to stage 0) rejects it:",
                    shown=_shown(s),
                )
                + f"\n{e}{hint}"
            ) from None
    most = max(per_round * rounds for _p, per_round, rounds in cases)
    return _(
        "{n} cases, p up to {p}, up to {most} forwards a rank", n=len(cases), p=max(c[0] for c in cases), most=most
    )


def _check_in_flight(fn, cases) -> str:
    for case in cases:
        s = _rounds(fn, *case)
        mine = simulate(s, UNIT).makespan
        best = simulate(repeat(make_schedule("inference", s.p, s.per_round), s.rounds), UNIT).makespan
        if mine > best + 1e-9:
            first = [a.mb for a in s.actions[0]]
            by_sequence = sorted(first, key=lambda mb: (mb % s.per_round, mb // s.per_round))
            hint = " " + (
                _(
                    "Each micro-batch goes through all its rounds before the next one starts, so the stages take "
                    "turns. Take every micro-batch of a round before the next round: while the last stage picks "
                    "micro-batch 0's token, stage 0 already runs micro-batch 1."
                )
                if s.per_round > 1 and first == by_sequence
                else (
                    out_of_order(s)
                    or _(
                        "Some rank waits while a micro-batch it could run is ready: on every "
                        "rank, a round's micro-batches in order, then the next round's."
                    )
                )
            )
            raise Mistake(
                _(
                    "at {shown}, every stage's forward taking 1 time unit, yours takes {mine:g} units; with "
                    "all {per_round} micro-batches of a round in flight the rounds take {best:g}.",
                    shown=_shown(s),
                    mine=mine,
                    per_round=s.per_round,
                    best=best,
                )
                + hint
            )
    return _("every round's micro-batches in flight, no stage idle that need not be")


# -- a stream's times --------------------------------------------------------------------------------
def stream_cases(rng: random.Random) -> list[tuple[Stream, list[float], float]]:
    """(stream, each stage's ms for one micro-batch, ms per message): all at once, even and Poisson
    arrivals, stages of uneven cost, messages free and not."""
    fixed = [
        (Stream(8, 2), [1.0, 1.0], 0.0),
        (Stream(10, 4, rate=2000), [0.5, 1.5, 1.0], 0.0),
        (Stream(12, 3, rate=800), [1.0, 2.0], 0.25),
    ]
    drawn = []
    for i in range(12):
        p, k = rng.randint(1, 6), rng.randint(1, 6)
        rate = None if i % 4 == 0 else rng.choice([200.0, 500.0, 1000.0, 3000.0, 10000.0])
        arrivals = "even" if rate is None else rng.choice(["even", "poisson"])  # all at once has no Poisson form
        stream = Stream(rng.randint(1, 40), k, rate, arrivals, seed=rng.randint(0, 10**6))
        drawn.append(
            (
                stream,
                [round(rng.uniform(0.2, 3.0), 3) for _n in range(p)],
                0.0 if i % 3 == 0 else round(rng.uniform(0.01, 0.5), 3),
            )
        )
    return fixed + drawn


def _numbers(value, name: str, n: int | None = None):
    if n is None:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise Mistake(
                _(
                    "{name} returned {kind} {value!r:.40}; return a number",
                    name=name,
                    kind=type(value).__name__,
                    value=value,
                )
            )
        return float(value)
    try:
        out = [float(x) for x in value]
    except (TypeError, ValueError):
        raise Mistake(
            _(
                "{name} returned {kind} {value!r:.40}; return a list with one time (ms) per request",
                name=name,
                kind=type(value).__name__,
                value=value,
            )
        ) from None
    if len(out) != n:
        fields = dict(name=name, got=len(out), n=n)
        raise Mistake(
            _(
                "{name} returned {got} times (one per micro-batch?) for {n} requests; return one time per request: "
                "when its result leaves the last stage (every request of a micro-batch gets it at once)",
                **fields,
            )
            if len(out) < n
            else _(
                "{name} returned {got} times for {n} requests; return one time per request: when "
                "its result leaves the last stage (every request of a micro-batch gets it at once)",
                **fields,
            )
        )
    return out


def _describe(stream: Stream, stage_ms, latency) -> str:
    fields = dict(n=stream.requests, k=stream.microbatch, stages=stage_ms, latency=latency)
    if stream.rate is None:
        return _(
            "{n} requests arriving all at time 0, micro-batches of k={k}, stages {stages} ms, {latency:g} ms a message",
            **fields,
        )
    return _(
        "{n} requests arriving {rate:g}/s ({arrivals}), micro-batches of k={k}, stages {stages} ms, {latency:g} ms a "
        "message",
        rate=stream.rate,
        arrivals=stream.arrivals,
        **fields,
    )


def _check_done(fn, cases) -> str:
    for stream, stage_ms, latency in cases:
        arrivals = stream.arrival_ms()
        name = f"{getattr(fn, '__name__', 'done_times')}(arrival_ms, {stream.microbatch}, {stage_ms}, {latency:g})"
        mine = ask(
            fn,
            list(arrivals),
            stream.microbatch,
            list(stage_ms),
            latency,
            name=name,
            advice=_times_advice(),
            take=lambda v: _numbers(v, name, stream.requests),
        )
        right = simulated(stream, stage_ms, latency)
        wrong = next((i for i, (x, y) in enumerate(zip(mine, right)) if not close(x, y)), None)
        if wrong is not None:
            mb = stream.microbatch_of(wrong)
            raise Mistake(
                _(
                    "{described}: request {wrong} (micro-batch {mb}, arrived at {arrived:.4g} ms) is done at "
                    "{mine:.6g} ms you say, at {right:.6g} ms the simulator says.",
                    described=_describe(stream, stage_ms, latency),
                    wrong=wrong,
                    mb=mb,
                    arrived=arrivals[wrong],
                    mine=mine[wrong],
                    right=right[wrong],
                )
                + stream_hint(stream, stage_ms, latency, mine, arrivals)
            )
    return _("{n} streams drawn at random, uneven stages, messages free and not", n=len(cases))


# the slowest stage in the middle, last, first, and two stages tied for slowest
THROUGHPUT_FIXED = [(4, [1.0, 2.5, 1.5]), (2, [0.5, 1.0, 2.0]), (3, [2.0, 0.5, 1.25, 0.75]), (5, [1.5, 0.5, 1.5])]


def _check_throughput(fn, rng: random.Random) -> str:
    drawn = [
        (rng.randint(1, 8), [round(rng.uniform(0.2, 3.0), 3) for _n in range(rng.randint(1, 6))]) for _n in range(6)
    ]
    for _i, (k, stage_ms) in enumerate(THROUGHPUT_FIXED + drawn):
        p = len(stage_ms)
        name = f"{getattr(fn, '__name__', 'peak_throughput')}({k}, {stage_ms})"
        mine = ask(fn, k, list(stage_ms), name=name, advice=_times_advice(), take=lambda v: _numbers(v, name))
        few, many = 4 * p, 4 * p + 50  # the pipeline full: each further micro-batch adds one beat
        spans = [max(simulated(Stream(n * k, k), stage_ms, 0.1)) for n in (few, many)]
        right = 1000.0 * k * (many - few) / (spans[1] - spans[0])
        if not close(mine, right, 1e-6):
            hint = ""
            if close(mine, 1000.0 * k / sum(stage_ms)):
                hint = " " + _(
                    "That is one micro-batch at a time through the whole pipeline; with the stream never "
                    "running dry every stage works on its own micro-batch at once."
                )
            elif close(mine, 1000.0 * k * p / sum(stage_ms)):
                hint = " " + _(
                    "That holds when every stage costs the same. These stages do not: the slowest stage takes "
                    "one micro-batch in its time, and the others must wait for it."
                )
            elif close(mine, 1000.0 / max(stage_ms)):
                hint = " " + _("That counts micro-batches per second; each micro-batch holds k={k} requests.", k=k)
            elif close(mine, right / 1000):
                hint = " " + _(
                    "That is requests per ms: the stage times are in ms, the throughput in requests per second."
                )
            elif p > 1 and (
                close(mine, 1000.0 * k / max(stage_ms[1:])) or close(mine, 1000.0 * k / max(stage_ms[:-1]))
            ):
                hint = " " + _(
                    "That leaves a stage out of the slowest: every stage, the first and the last too, sets the pace."
                )
            raise Mistake(
                _(
                    "micro-batches of k={k} requests, stages {stages} ms for one micro-batch, requests never "
                    "running out: you say {mine:g} requests/s, the simulator serves {right:g}.",
                    k=k,
                    stages=stage_ms,
                    mine=mine,
                    right=right,
                )
                + hint
            )
    return _(
        "{fixed} pipelines (the slowest stage first, last, in the middle, tied) and {drawn} drawn at random, "
        "against a long simulated stream",
        fixed=len(THROUGHPUT_FIXED),
        drawn=len(drawn),
    )


def check_serving(generation_order, done_times, peak_throughput) -> None:
    """Check the learner's generation_order(p, per_round, rounds), done_times(arrival_ms, k,
    stage_ms, latency) and peak_throughput(k, stage_ms)."""
    rng = random.Random()
    orders, streams = order_cases(rng), stream_cases(rng)
    verdict(
        [
            (_("generation's rounds: valid, each token fed back"), lambda: _check_valid(generation_order, orders)),
            (_("a round's micro-batches in flight"), lambda: _check_in_flight(generation_order, orders)),
            (_("each request's result time"), lambda: _check_done(done_times, streams)),
            (_("the pipeline's peak throughput"), lambda: _check_throughput(peak_throughput, rng)),
        ]
    )
