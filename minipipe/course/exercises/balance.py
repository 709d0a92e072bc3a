"""Exercise: balance the stages. The learner cuts per-layer costs into p contiguous stages so the
slowest is as light as it can be, measures what to weigh the tiny GPT's layers by, and sees the
cut measured on real processes beside the parameter cut.

The optimum is the checker's own, found by trying every cut (`optimum`), not the engine's
partitioner: each stage costs exactly the sum of its layers' costs (`stage_costs`), every cut
whose slowest stage ties the optimum is accepted, and one whose slowest stage is heavier, by
however little, is refused. The engine's partitioner and profiler are out of reach while the
learner's functions run, and the cost lists are drawn afresh at every check.
"""
from __future__ import annotations

import itertools
import random
import statistics

import torch
from torch import nn

from ...models.catalog import make_task
from .guard import ask
from .runs import run_real
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the course models (to run the GPT's layers), not
# the engine's partitioner or profiler
ALLOWED = ("minipipe.models",)
# lesson 06's GPT: the embedding holds many parameters and does no math, the head does the most
GPT = dict(vocab=1536, width=32, block=64, depth=3)
BATCH, M, P = 64, 8, 2


def cases(n: int = 60, seed=None) -> list[tuple[list[float], int]]:
    """A few by hand, then n drawn afresh at every check (seed None): up to 12 layers, 5 stages."""
    rng = random.Random(seed)
    out = [([1.0] * 6, 3), ([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2), ([1.0, 2.0, 3.0], 3), ([0.0, 0.0, 4.0, 0.0], 2),
           ([2.0], 1)]
    for _ in range(n):
        k = rng.randint(2, 12)
        costs = [round(rng.choice([rng.uniform(0, 1), rng.uniform(0, 10), 0.0]), 3) for _ in range(k)]
        out.append((costs, rng.randint(1, min(k, 5))))
    return out


def stage_costs(costs, bounds) -> list[float]:
    """What each stage of the cut costs: the sum of exactly its layers' costs."""
    return [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])]


def optimum(costs, p: int) -> tuple[float, tuple[int, ...]]:
    """The lightest slowest stage over every cut of `costs` into p contiguous, non-empty stages, and
    the first cut that reaches it: all C(n − 1, p − 1) cuts tried, so it is exact by construction."""
    n = len(costs)
    best = None
    for inner in itertools.combinations(range(1, n), p - 1):
        bounds = (0, *inner, n)
        slowest = max(stage_costs(costs, bounds))
        if best is None or slowest < best[0]:
            best = (slowest, bounds)
    return best


def ties(slowest: float, best: float) -> bool:
    """Equal but for rounding in the sums (a relative 1e-9): a cut a layer off is never this close."""
    return slowest <= best + 1e-9 * max(1.0, abs(best))


def _even(n: int, p: int) -> tuple[int, ...]:
    size, extra = divmod(n, p)
    return tuple(itertools.accumulate([0] + [size + (s < extra) for s in range(p)]))


def _bounds(balance, costs, p) -> tuple[int, ...]:
    name = f"balance({costs}, {p})"

    def take(value):
        try:
            return tuple(int(b) for b in value)
        except (TypeError, ValueError):
            return value
    value = ask(balance, list(costs), p, name=name, advice="find the cut yourself", take=take)
    try:
        bounds = tuple(int(b) for b in value)
    except (TypeError, ValueError):
        raise Mistake(f"balance({costs}, {p}) returned {value!r:.60}; return the bounds, p + 1 whole numbers from 0 "
                      f"to {len(costs)}: stage s gets layers bounds[s] .. bounds[s+1] − 1") from None
    n = len(costs)
    if len(bounds) != p + 1 or bounds[0] != 0 or bounds[-1] != n:
        raise Mistake(f"balance({costs}, {p}) returned {bounds}; the bounds of {p} stages are {p + 1} numbers from 0 to "
                      f"{n}, e.g. {_even(n, p)} for equal layers")
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise Mistake(f"balance({costs}, {p}) returned {bounds}: the bounds must rise strictly, so that every stage gets "
                      f"at least one layer")
    return bounds


def _valid(balance, todo) -> str:
    for costs, p in todo:
        _bounds(balance, costs, p)
    return f"{len(todo)} cases, up to 12 layers and 5 stages"


def judge(mine: tuple[int, ...], costs, p: int) -> None:
    """A Mistake unless the cut `mine` (valid bounds) has the lightest slowest stage there is."""
    slow = max(stage_costs(costs, mine))
    best, cut = optimum(costs, p)
    if not ties(slow, best):
        shown = lambda bounds: ", ".join(f"{c:g}" for c in stage_costs(costs, bounds))   # noqa: E731
        hint = ""
        if mine == _even(len(costs), p) and cut != mine:
            hint = " Yours cuts by the number of layers, as if every layer cost the same."
        raise Mistake(f"costs {costs}, p={p}: your cut {mine} gives stages costing {shown(mine)}, the slowest {slow:g}; "
                      f"the cut {cut} gets the slowest down to {best:g} ({shown(cut)}).{hint}")


def _optimal(balance, todo) -> str:
    for costs, p in todo:
        judge(_bounds(balance, costs, p), costs, p)
    return "the slowest stage as light as the best cut's, every case"


def _gpt():
    task = make_task("gpt", batch_size=BATCH, **GPT)
    layers = task.layers()
    return layers, task.batch(0)[0][: BATCH // M]


def _gpt_costs(layer_costs) -> list[float]:
    layers, sample = _gpt()
    value = ask(layer_costs, layers, sample, name="layer_costs",
                advice="time each layer's forward and backward yourself (time.perf_counter)",
                take=lambda v: list(v) if isinstance(v, (list, tuple)) else v)
    try:
        costs = [float(c) for c in value]
    except (TypeError, ValueError):
        raise Mistake(f"layer_costs returned {value!r:.60}; return one number per layer") from None
    if len(costs) != len(layers):
        raise Mistake(f"layer_costs returned {len(costs)} numbers for {len(layers)} layers; return one per layer")
    return costs


def _weighs_time(layer_costs) -> str:
    costs = _gpt_costs(layer_costs)
    layers, _ = _gpt()
    params = [float(sum(t.numel() for t in layer.parameters())) for layer in layers]
    shown = ", ".join(f"{c:.3g}" for c in costs)
    if costs == params:
        raise Mistake(f"your costs ({shown}) are the layers' parameter counts. The embedding holds "
                      f"{int(params[0]):,} parameters but only looks rows up, and the head does more math than a "
                      f"block: a cut balanced in parameters is not balanced in time. Weigh the layers by what the "
                      f"pipeline waits for: the time of each layer's forward and backward")
    if max(costs) - min(costs) <= 1e-12 * max(1.0, max(costs)):
        raise Mistake(f"your costs ({shown}) make every layer cost the same; the embedding, the blocks and the head "
                      f"are not alike. Measure them: time each layer's forward and backward")
    # only what timing noise cannot flip: the embedding takes a tenth of a block's time or less
    if costs[0] >= min(costs[1:]):
        raise Mistake(f"your costs ({shown}) do not say what the GPT's layers take in time: its embedding (layer 0) "
                      f"holds the most parameters but only looks rows up, so it is by far the cheapest. Measure "
                      f"forward and backward of each layer, several times, and keep the median")
    return f"the embedding the cheapest, although it holds the most parameters: {shown}"


class Grouped:
    """The course GPT with its layers grouped into the given stages, so that a run with uniform
    partitioning (one group per stage) uses a cut of our choosing; the same weights and data."""

    def __init__(self, batch_size: int, seed: int, bounds: list, **gpt_args):
        self.task = make_task("gpt", batch_size=batch_size, seed=seed, **gpt_args)
        self.bounds = list(bounds)

    def layers(self):
        layers = self.task.layers()
        return [nn.Sequential(*layers[a:b]) for a, b in zip(self.bounds, self.bounds[1:])]

    def loss(self, output, target):
        return self.task.loss(output, target)

    def batch(self, step):
        return self.task.batch(step)


def _measured(balance, layer_costs) -> str:
    from ...engine.config import RunConfig

    costs = _gpt_costs(layer_costs)
    mine = _bounds(balance, costs, P)
    common = dict(schedule="1f1b", p=P, m=M, batch_size=BATCH, steps=4, timeout=60.0, startup_timeout=120.0)
    configs = [RunConfig(model=f"{__name__}:Grouped", model_args={"bounds": list(mine), **GPT}, **common),
               RunConfig(model="gpt", model_args=GPT, partition="params", **common)]
    results = run_real(configs, ["your cut", "the parameter cut"], rtol=1e-4)
    lines = []
    for label, res in zip(("yours", "by parameters"), results):
        traces = res.traces[1:]          # the first step warms up
        busy = [statistics.median(t.busy(r) for t in traces) for r in range(P)]
        idle = [statistics.median(t.bubble_per_rank()[r] for t in traces) for r in range(P)]
        bounds = mine if label == "yours" else res.plan.partition.bounds
        lines.append(f"{label} {tuple(bounds)}: busy " + ", ".join(f"rank {r} {b:.0f} ms" for r, b in enumerate(busy))
                     + "; idle " + ", ".join(f"{100 * x:.0f} %" for x in idle))
    return "the whole model's losses, measured (median of 3 steps; times on a busy machine vary):\n      " + \
        "\n      ".join(lines)


def check_balance(balance, layer_costs) -> None:
    """Check the learner's balance(costs, p) -> bounds against the exact optimum, their layer_costs
    (layers, sample) for the tiny GPT, and run their cut beside the parameter cut."""
    torch.set_num_threads(1)     # as each worker runs: layer times measured here are the workers'
    todo = cases()
    verdict([
        ("valid bounds", lambda: _valid(balance, todo)),
        ("the slowest stage as light as it can be", lambda: _optimal(balance, todo)),
        ("the GPT's layers weighed by time", lambda: _weighs_time(layer_costs)),
        ("a measured run on 2 processes, beside the parameter cut", lambda: _measured(balance, layer_costs)),
    ])
