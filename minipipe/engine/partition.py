"""Cut a model's layers into p·v pipeline stages.

A pipeline runs only as fast as its slowest stage: every other stage waits for it once per
micro-batch. So we cut the list of layers into contiguous pieces whose costs are as equal as
possible, with one of three measures of cost:

    uniform  every layer costs 1         (cheap, right when all layers are alike)
    params   a layer's parameter count   (a proxy for its memory and, roughly, its work)
    time     measured forward + backward (what the pipeline actually waits for)

    part = partition(task.layers(), n_stages=4, method="time", sample_input=x[:8])
    print(part.report())
    stage_layers = layers[part.bounds[s]:part.bounds[s + 1]]

When a split has slack, the earlier stages take the extra layer and the later ones stay lighter:
the last stage also computes the loss, which no layer's cost counts.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate

import torch
from torch import nn

METHODS = {"uniform": "layers", "params": "params", "time": "ms"}  # method -> unit of cost


@dataclass(frozen=True)
class Partition:
    """Stage s owns layers[bounds[s]:bounds[s + 1]] and costs costs[s] (in `unit`)."""

    bounds: tuple[int, ...]
    costs: tuple[float, ...]
    method: str
    unit: str

    def __post_init__(self):
        if len(self.bounds) < 2 or self.bounds[0] != 0 or len(self.costs) != len(self.bounds) - 1:
            raise ValueError(
                f"bounds must run from 0 to n_layers with one cost per stage; got "
                f"bounds={self.bounds}, costs={self.costs}"
            )
        if any(a >= b for a, b in zip(self.bounds, self.bounds[1:])):
            raise ValueError(f"bounds must increase strictly (every stage needs a layer); got {self.bounds}")

    @property
    def n_stages(self) -> int:
        return len(self.bounds) - 1

    def layers_of(self, stage: int) -> range:
        return range(self.bounds[stage], self.bounds[stage + 1])

    @property
    def imbalance(self) -> float:
        """Largest stage cost / mean stage cost: 1.0 is perfect; 1.5 means the pipeline runs
        at the pace of a stage that does 50 % more than its share."""
        mean = sum(self.costs) / self.n_stages
        return max(self.costs) / mean if mean > 0 else 1.0

    def report(self) -> str:
        total = sum(self.costs) or 1.0
        digits = ".3f" if self.unit == "ms" else ",.0f"
        lines = [
            f"partition by {self.method}: {self.bounds[-1]} layers into {self.n_stages} stages",
            f"{'stage':>5}  {'layers':<9} {'cost (' + self.unit + ')':>14}  {'share':>6}",
        ]
        for s, cost in enumerate(self.costs):
            first, last = self.bounds[s], self.bounds[s + 1] - 1
            span = f"{first}" if first == last else f"{first}-{last}"
            lines.append(f"{s:>5}  {span:<9} {cost:>14{digits}}  {cost / total:>6.1%}")
        lines.append(f"imbalance {self.imbalance:.2f} (largest stage / mean stage; 1.00 is perfect)")
        return "\n".join(lines)


# -- the linear-partition problem -------------------------------------------------------------
def split_evenly(costs: Sequence[float], n_stages: int) -> tuple[int, ...]:
    """Cut `costs` into `n_stages` contiguous, non-empty pieces so that the largest piece sum is
    as small as possible (exactly, by dynamic programming). Returns the bounds.

    Many splits can share that smallest maximum: with costs [9, 1, 1, 1, 1, 1, 1] and 4 stages,
    every split puts 9 alone, and [1], [1], [1, 1, 1, 1] is as "optimal" as [1, 1], [1, 1], [1, 1].
    So a second pass picks, among the splits that stay under that maximum, the most even one
    (least sum of squared piece sums); remaining ties go to lighter later stages.
    """
    costs = [float(c) for c in costs]
    _check_stage_count(n_stages, len(costs))
    if any(not math.isfinite(c) or c < 0 for c in costs):
        raise ValueError(f"layer costs must be finite and >= 0; got {costs}")
    prefix = [0.0, *accumulate(costs)]

    def piece(i: int, j: int) -> float:  # the cost of layers i .. j-1 as one stage
        return prefix[j] - prefix[i]

    limit, _ = _cheapest_split(len(costs), n_stages, piece, max)
    _, bounds = _cheapest_split(
        len(costs), n_stages, lambda i, j: piece(i, j) ** 2 if piece(i, j) <= limit else math.inf, lambda a, b: a + b
    )
    return bounds


def _cheapest_split(
    n: int, n_stages: int, stage_cost: Callable[[int, int], float], combine: Callable[[float, float], float]
) -> tuple[float, tuple[int, ...]]:
    """best[s][j] = the cheapest way to put layers 0 .. j-1 into s stages, where a split's cost
    folds its stages' costs with `combine` (max, or +). The last stage of that split is i .. j-1
    for the i that minimises combine(best[s-1][i], stage_cost(i, j)); walking those i back from
    (n_stages, n) gives the bounds."""
    best = [[math.inf] * (n + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for s in range(1, n_stages + 1):
        for j in range(s, n - (n_stages - s) + 1):  # leave at least a layer for each later stage
            for i in range(s - 1, j):
                total = combine(best[s - 1][i], stage_cost(i, j))
                if total <= best[s][j]:  # '<=': on ties the latest cut wins
                    best[s][j], cut[s][j] = total, i
    bounds = [n]
    for s in range(n_stages, 0, -1):
        bounds.append(cut[s][bounds[-1]])
    return best[n_stages][n], tuple(reversed(bounds))


# -- measuring layers -------------------------------------------------------------------------
def profile_layers(
    layers: Sequence[nn.Module], sample_input: torch.Tensor, repeats: int = 5, warmup: int = 2, device=None
) -> list[float]:
    """Median forward + backward time (ms) of each layer on one micro-batch, `sample_input`,
    each layer fed the previous layer's output. The layers must already live on `device`
    (default: the input's device). Leaves no .grad behind and the RNG where it was."""
    if not isinstance(repeats, int) or repeats < 1 or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"repeats must be a whole number >= 1 and warmup >= 0; got {repeats}, {warmup}")
    device = torch.device(device) if device is not None else sample_input.device
    x = sample_input.detach().to(device)
    times = []
    # fork_rng: dropout and friends draw random numbers; profiling must not shift training's.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.enable_grad():
        for k, layer in enumerate(layers):
            if any(p.device != device for p in layer.parameters()):
                raise ValueError(
                    f"layer {k} has parameters off {device}; move the layers there "
                    f"first (layer.to(device)) or pass the matching device="
                )
            if k > 0 and x.is_floating_point():
                x = x.detach().requires_grad_(True)  # a later stage also sends back its input's grad
            step = partial(_forward_backward, layer, x)
            for _ in range(warmup):
                step()
            times.append(statistics.median(_time_ms(step, device) for _ in range(repeats)))
            with torch.no_grad():
                x = layer(x)
    return times


def _forward_backward(layer: nn.Module, x: torch.Tensor) -> None:
    out = layer(x)
    # autograd.grad returns the gradients instead of adding them to .grad: the model is untouched.
    wrt = [t for t in (x, *layer.parameters()) if t.requires_grad]
    if wrt and out.requires_grad:
        torch.autograd.grad(out, wrt, grad_outputs=torch.ones_like(out), allow_unused=True)


def _time_ms(fn: Callable[[], None], device: torch.device) -> float:
    if device.type == "cuda":
        # CUDA runs asynchronously: the wall clock would time the launch, events time the work.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


# -- the entry point --------------------------------------------------------------------------
def partition(
    layers: Sequence[nn.Module],
    n_stages: int,
    method: str = "uniform",
    sample_input: torch.Tensor | None = None,
    **profile_kw,
) -> Partition:
    """Cut `layers` into `n_stages` (= p·v) stages by `method`: "uniform", "params" or "time"."""
    if len(layers) == 0:
        raise ValueError("the model has no layers; pass the list from task.layers()")
    _check_stage_count(n_stages, len(layers))
    if method not in METHODS:
        raise ValueError(f"unknown partition method {method!r}; choose one of {', '.join(METHODS)}")
    if method != "time" and (sample_input is not None or profile_kw):
        raise ValueError(f"sample_input and profiling options only apply to method='time', not {method!r}")

    if method == "uniform":
        # As even as layer counts allow; the first (n mod stages) stages take one layer more.
        size, extra = divmod(len(layers), n_stages)
        bounds = tuple(accumulate([0] + [size + (s < extra) for s in range(n_stages)]))
        costs = [1.0] * len(layers)
    elif method == "params":
        costs = [float(sum(p.numel() for p in layer.parameters())) for layer in layers]
        bounds = split_evenly(costs, n_stages)
    else:
        if sample_input is None:
            raise ValueError(
                "method='time' times each layer on a sample micro-batch; pass "
                "sample_input= (e.g. task.batch(0)[0][:micro_batch_size])"
            )
        costs = profile_layers(layers, sample_input, **profile_kw)
        bounds = split_evenly(costs, n_stages)
    stage_costs = tuple(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
    return Partition(bounds, stage_costs, method, METHODS[method])


def _check_stage_count(n_stages, n_layers: int) -> None:
    if isinstance(n_stages, bool) or not isinstance(n_stages, int) or n_stages < 1:
        raise ValueError(f"n_stages must be a whole number >= 1 (ranks p times virtual stages v); got {n_stages!r}")
    if n_layers == 0:
        raise ValueError("there are no layers to split; pass at least one layer cost")
    if n_stages > n_layers:
        raise ValueError(
            f"p*v = {n_stages} stages but the model has only {n_layers} layers; every "
            f"stage needs a layer, so use fewer ranks or virtual stages (p*v <= {n_layers}) "
            f"or a deeper model"
        )


def stage_module(layers: list, cut: Partition, stage: int) -> nn.Sequential:
    """Stage `stage`'s layers, as one module."""
    return nn.Sequential(*(layers[i] for i in cut.layers_of(stage)))


def check_not_shared(layers: Sequence[nn.Module], cut: Partition) -> None:
    """Refuse a parameter that layers of two stages share (one module used twice, tied embeddings):
    each stage would train its own copy, and the losses would part from one process's. Raises
    ValueError naming the layers. Sharing inside one stage is one parameter there, and fine."""
    stage_of = {i: s for s in range(cut.n_stages) for i in cut.layers_of(s)}
    first: dict[int, int] = {}  # id of a parameter -> the first layer that holds it
    for i, layer in enumerate(layers):
        for param in layer.parameters():
            j = first.setdefault(id(param), i)
            if stage_of[j] != stage_of[i]:
                raise ValueError(
                    f"layers {j} and {i} (stages {stage_of[j]} and {stage_of[i]}) share a parameter "
                    f"of shape {tuple(param.shape)}: each stage would train its own copy, and the shared weight "
                    f"would come apart. Give each layer its own parameters, or use fewer stages, so "
                    f"that both fall in one"
                )
