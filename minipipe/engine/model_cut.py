"""Where a run's model is cut into its schedule's stages, and the shapes that cross each cut.

`cut_model` checks that tensor parallelism fits the layers and that every stage gets one, and
cuts them with partition.py's method (timing the layers where the ranks will run, for "time");
`layer_shapes` runs one micro-batch through the whole model to note each layer's input (shape,
dtype), from which a receiver allocates its buffer before the data arrives; `stage_outputs`
reads each stage's output off them. Training (config.prepare) and serving (serve/plan.py) both
cut here.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from ..parallel.tensor import check_tensor_parallel
from ..schedule.ir import Schedule
from .partition import Partition, partition
from .placement import Placement

if TYPE_CHECKING:
    from .config import EngineConfig


def cut_model(
    c: EngineConfig, schedule: Schedule, layers: list, sample: torch.Tensor, where: Placement | None = None
) -> tuple[Partition, list]:
    """Where the model's `layers` are cut into the schedule's stages, and the (shape, dtype)
    through every layer for one micro-batch (`sample`, layer_shapes); checks that tensor
    parallelism fits the layers and that every stage gets one. partition="time" times the layers
    where the ranks will run (`where`): a GPU run balanced by CPU timings is not balanced."""
    check_tensor_parallel(layers, c.tp)
    if schedule.n_stages > len(layers):
        n = len(layers)
        raise ValueError(
            f"p*v = {schedule.p}*{schedule.v} = {schedule.n_stages} stages but the model has only {n} "
            f"layers; every stage needs at least one, so use p*v <= {n} (fewer ranks or stages per "
            f"rank) or a deeper model (model_args)"
        )
    if c.partition == "time":
        on = profile_device(where) if where is not None else torch.device("cpu")
        timed = layers if on.type == "cpu" else [copy.deepcopy(layer).to(on) for layer in layers]
        cut = partition(timed, schedule.n_stages, "time", sample_input=sample.to(on), device=on)
    else:
        cut = partition(layers, schedule.n_stages, c.partition)
    return cut, layer_shapes(layers, sample)


def stage_outputs(cut: Partition, through: list) -> list:
    """Each stage's output (shape, dtype), from the shapes through every layer."""
    return [through[cut.bounds[s + 1]] for s in range(cut.n_stages)]


def profile_device(where: Placement) -> torch.device:
    """The device partition="time" times the layers on: the first rank's."""
    return torch.device("cuda", where.gpus[0]) if where.device == "cuda" else torch.device("cpu")


def layer_shapes(layers, sample: torch.Tensor) -> list:
    """Run one micro-batch through the whole model once (no grad) and note the (shape, dtype) of
    each layer's input, and last the model's output: a receiver allocates its buffer from them
    before the data arrives, and the traffic formulas (parallel/accounting.py) count bytes with them."""
    shapes = [(tuple(sample.shape), sample.dtype)]
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        x = sample
        for i, layer in enumerate(layers):
            try:
                x = layer(x)
            except Exception as e:  # a shape or dtype mismatch, mostly: say which layer, on what
                got = f"{tuple(x.shape)} {x.dtype}" if torch.is_tensor(x) else type(x).__name__
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(
                    f"layer {i} ({type(layer).__name__}) failed on its input of shape {got}, one "
                    f"micro-batch: {type(e).__name__}: {first}. Check that its input size matches "
                    + (f"what layer {i - 1} gives" if i else "what batch() gives")
                ) from None
            shapes.append((tuple(x.shape), x.dtype))
    return shapes
