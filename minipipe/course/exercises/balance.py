"""Exercise 06: balance the stages. The learner cuts per-layer costs into p contiguous stages so the
slowest is as light as it can be (checked against the exact optimum), chooses what to weigh the
tiny GPT's layers by, and sees the cut measured on real processes beside the parameter cut."""
from __future__ import annotations

import random
import statistics

import torch
from torch import nn

from ...engine.partition import split_evenly
from ...models.catalog import make_task
from .runs import run_real
from .verdict import Mistake, call, verdict

# lesson 06's GPT: the embedding holds many parameters and does no math, the head does the most
GPT = dict(vocab=1536, width=32, block=64, depth=3)
BATCH, M, P = 64, 8, 2


def cases(n: int = 60, seed: int = 6) -> list[tuple[list[float], int]]:
    rng = random.Random(seed)
    out = [([1.0] * 6, 3), ([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2), ([1.0, 2.0, 3.0], 3), ([0.0, 0.0, 4.0, 0.0], 2),
           ([2.0], 1)]
    for _ in range(n):
        k = rng.randint(2, 12)
        costs = [round(rng.choice([rng.uniform(0, 1), rng.uniform(0, 10), 0.0]), 3) for _ in range(k)]
        out.append((costs, rng.randint(1, min(k, 5))))
    return out


def _bounds(balance, costs, p) -> tuple[int, ...]:
    value = call(balance, list(costs), p, name=f"balance({costs}, {p})")
    try:
        bounds = tuple(int(b) for b in value)
    except (TypeError, ValueError):
        raise Mistake(f"balance({costs}, {p}) returned {value!r:.60}; return the bounds, p + 1 whole numbers from 0 "
                      f"to {len(costs)}: stage s gets layers bounds[s] .. bounds[s+1] − 1") from None
    n = len(costs)
    if len(bounds) != p + 1 or bounds[0] != 0 or bounds[-1] != n:
        raise Mistake(f"balance({costs}, {p}) returned {bounds}; the bounds of {p} stages are {p + 1} numbers from 0 to "
                      f"{n}, e.g. {tuple(split_evenly([1.0] * n, p))} for equal layers")
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise Mistake(f"balance({costs}, {p}) returned {bounds}: the bounds must rise strictly, so that every stage gets "
                      f"at least one layer")
    return bounds


def _stage_costs(costs, bounds) -> list[float]:
    return [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])]


def _valid(balance) -> str:
    for costs, p in cases():
        _bounds(balance, costs, p)
    return f"{len(cases())} cases, up to 12 layers and 5 stages"


def _optimal(balance) -> str:
    for costs, p in cases():
        mine = _bounds(balance, costs, p)
        best = split_evenly(costs, p)
        slow, fastest_possible = max(_stage_costs(costs, mine)), max(_stage_costs(costs, best))
        if slow > fastest_possible + 1e-9:
            hint = ""
            if mine == tuple(split_evenly([1.0] * len(costs), p)):
                hint = " Yours cuts by the number of layers, as if every layer cost the same."
            raise Mistake(f"costs {costs}, p={p}: your cut {mine} gives stages costing "
                          f"{[round(c, 3) for c in _stage_costs(costs, mine)]}, the slowest {slow:g}; the cut "
                          f"{best} gets the slowest down to {fastest_possible:g} "
                          f"({[round(c, 3) for c in _stage_costs(costs, best)]}).{hint}")
    return "the slowest stage as light as the exact optimum's, every case"


def _gpt():
    task = make_task("gpt", batch_size=BATCH, **GPT)
    layers = task.layers()
    return layers, task.batch(0)[0][: BATCH // M]


def _gpt_costs(layer_costs) -> list[float]:
    layers, sample = _gpt()
    value = call(layer_costs, layers, sample, name="layer_costs")
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
                      f"pipeline waits for: time (minipipe.engine.partition.profile_layers measures it)")
    if max(costs) - min(costs) <= 1e-12 * max(1.0, max(costs)):
        raise Mistake(f"your costs ({shown}) make every layer cost the same; the embedding, the blocks and the head "
                      f"are not alike. Measure them: minipipe.engine.partition.profile_layers")
    # only what timing noise cannot flip: the embedding takes a tenth of a block's time or less
    if costs[0] >= min(costs[1:]):
        raise Mistake(f"your costs ({shown}) do not say what the GPT's layers take in time: its embedding (layer 0) "
                      f"holds the most parameters but only looks rows up, so it is by far the cheapest. Measure "
                      f"forward and backward of each layer: minipipe.engine.partition.profile_layers")
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
    verdict([
        ("valid bounds", lambda: _valid(balance)),
        ("the slowest stage as light as it can be", lambda: _optimal(balance)),
        ("the GPT's layers weighed by time", lambda: _weighs_time(layer_costs)),
        ("a measured run on 2 processes, beside the parameter cut", lambda: _measured(balance, layer_costs)),
    ])
