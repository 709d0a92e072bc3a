"""The step time of a layout's pipeline: in closed form (what the simulator would find, without
replaying thousands of micro-batches), or replayed by the simulator where the closed form is only
close.

Every schedule kind the registry (minipipe/schedule/kinds.py) declares with a makespan formula and
a peak_inflight formula can be planned. For 1F1B, GPipe and the naive schedule the planner has its
own closed forms for ranks of unequal cost (the last also runs the head, the first the embedding,
the earlier ones take any extra blocks) with messages between them; tests/planner/test_plan.py and
tests/planner/test_formulas.py hold them to the simulator: GPipe's and the naive one's exactly, 1F1B's
exactly when every rank costs the same or the last is the busiest and messages are free, within a
few messages (c each; 2.1·c·(p−1) the most found) when the last is the busiest, and only close
(an earlier rank the busiest: it over-counts, by up to a fifth on few blocks) otherwise. Interleaved
1F1B's closed form is exact when its chunks cost the same and messages are free, and optimistic
otherwise (a heavy head, blocks that do not divide evenly, the messages of a deeper pipeline); any
other kind uses the registry's uniform-cost formula at the busiest rank's costs, plus the fill's and
drain's messages (the fewest any pipeline waits on: optimistic where more of them are on the
critical path). For
those, `simulated` replays the schedule itself: its makespan grows by the same amount with every p
more micro-batches once past its warm-up (m >= 2p covers every kind here), so two replays at small m
give it at any m.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..schedule import kinds
from ..schedule.ir import Schedule
from ..schedule.validate import check_structure
from ..sim.costs import Costs
from ..sim.pipeline import compute_span

EXACT = ("1f1b", "gpipe", "naive")  # closed forms the planner holds equal to the simulator


def pipeline_time(
    kind: str,
    p: int,
    m: int,
    v: int,
    *,
    busiest: float,
    mean: float,
    message: float,
    forward: float,
    backward: float,
    weight: float,
    forward_max: float,
    backward_max: float,
) -> float:
    """Step time of the pipeline (without data parallelism): `busiest` and `mean` are f + b of one
    micro-batch on the busiest and on the mean rank, `message` one message between neighbours;
    forward, backward, weight: the busiest rank's f, b and the weight-gradient part of b (for
    kinds that split the backward); forward_max, backward_max: the largest f and b of any rank.

    1F1B: the busiest rank paces the steady state and every rank's work fills and drains the
    pipeline, (m − 1)·busiest + p·mean, or the round trips pace it: a micro-batch's trip through
    all p ranks and back, p·mean + 2c(p−1), lets p micro-batches through, so unless the busiest
    rank is slower the steady state waits on ⌊(m − 1)(p − 1)/p⌋ whole round trips of messages,
    2c each, beside its (m − 1)·mean of work. The fill and drain cross p−1 boundaries each way,
    2c(p−1). Interleaved 1F1B: (m − 1/v)·busiest + (p/v)·mean, its deeper warm-up hiding the
    messages but in the fill and the drain, 2c·(p·v − 1). GPipe: a flow
    shop forwards then backwards, p·mean + (m − 1)(forward_max + backward_max) + 2c(p−1). Naive:
    each micro-batch alone, m·(p·mean + 2c(p−1))."""
    if p == 1:
        return m * busiest
    name = kinds.get(kind).name
    if name == "1f1b":
        trips = (m - 1) * (p - 1) // p  # whole round trips the steady state waits on
        fill_drain = p * mean + 2 * message * (p - 1)
        return max(
            (m - 1) * busiest + fill_drain,  # paced by the busiest rank
            (m - 1) * mean + fill_drain + 2 * message * trips,
        )  # paced by the round trips
    if name == "interleaved":
        return (m - 1 / v) * busiest + p / v * mean + 2 * message * (p * v - 1)
    if name == "gpipe":
        return p * mean + (m - 1) * (forward_max + backward_max) + 2 * message * (p - 1)
    if name == "naive":
        return m * (p * mean + 2 * message * (p - 1))
    makespan = kinds.KINDS[name].makespan
    assert makespan is not None  # a planned kind has the formula (plannable)
    return makespan(p, m, v, forward, backward, weight) + 2 * message * (p - 1)


@lru_cache(maxsize=4096)
def placement(kind: str, p: int, v: int) -> tuple[int, ...]:
    """The rank that owns each of the p·v stages under `kind` (Megatron's round robin, stage s on
    rank s % p, for most kinds; a V places the second chunk mirrored back, so rank 0 holds the
    first stage and the last): as the registry declares it, or read off the smallest schedule of
    the kind (the placement does not depend on m)."""
    k = kinds.get(kind)
    if k.placement is not None:
        return tuple(k.placement(p, v))
    for m in (1, p, 2 * p, 3 * p, 4 * p):
        if kinds.unsuited(k, p, m, v) is None:
            return (k.generate(p, m, v) if k.takes_v else k.generate(p, m)).placement
    return tuple(s % p for s in range(p * v))


@lru_cache(maxsize=64)
def checked_schedule(kind: str, p: int, m: int, v: int) -> Schedule:
    """The kind's schedule with its structure checked, kept: the top layouts of a search often
    replay the same one with other costs. The costed replay itself proves it finishes, as
    make_schedule's validation would (it raises ScheduleError if it cannot)."""
    k, v = kinds.check(kind, p, m, v)
    schedule = k.generate(p, m, v) if k.takes_v else k.generate(p, m)
    check_structure(schedule)
    return schedule


def plannable(kind: str) -> bool:
    """A kind the planner can time and size: it trains and the registry gives its formulas."""
    k = kinds.get(kind)
    return k.makespan is not None and k.peak_inflight is not None


@dataclass(frozen=True)
class StageTimes:
    """Each stage's forward, backward and weight-gradient time for one micro-batch, seconds."""

    forward: list[float]
    backward: list[float]
    weight: list[float]


def stage_times(
    counts: list[int],
    *,
    forward: float,
    backward: float,
    weight: float,
    embedding: float,
    head_forward: float,
    head_backward: float,
) -> StageTimes:
    """Per-stage times: `counts` blocks each at a block's forward, backward and weight-gradient
    time, the embedding on the first stage, the head on the last."""
    f, b, w = [n * forward for n in counts], [n * backward for n in counts], [n * weight for n in counts]
    f[0] += embedding
    f[-1] += head_forward
    b[-1] += head_backward
    return StageTimes(f, b, w)


def simulated(kind: str, p: int, m: int, v: int, stages: StageTimes, message: float) -> float:
    """The pipeline's makespan replayed by the simulator, per-stage costs as given (seconds), each
    message `message` seconds. Up to 5p micro-batches it replays m itself; beyond, it replays
    2p + (m mod p) and p more, and extends the difference (exact: see the module docstring;
    tests/planner/test_plan.py checks it against replaying m)."""

    def span(n: int) -> float:
        costs = Costs(forward=stages.forward, backward=stages.backward, weight=stages.weight, latency=message)
        return compute_span(checked_schedule(kind, p, n, v), costs)

    def accepted(n: int) -> bool:
        try:
            kinds.check(kind, p, n, v)
        except ValueError:
            return False
        return True

    first = 2 * p + m % p  # past every kind's warm-up (a V's is 2p − 1 micro-batches deep)
    while not accepted(first) and first + p < m:
        first += p
    if m <= first + 2 * p:
        return span(m)
    a, b = span(first), span(first + p)
    return a + (m - first) // p * (b - a)
