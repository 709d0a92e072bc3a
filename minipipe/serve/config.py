"""What a serving run is: a stream of requests (`ServeConfig`) or greedy generation
(`GenerateConfig`). Every field a training run shares — the model, the cut, placement, timeouts,
message order — is engine/config.py's `EngineConfig`, declared there once and checked once by
engine/run_checks.py; here only what serving adds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine.config import EngineConfig
from ..fields import named_fields
from ..sim.request_stream import Stream


@dataclass(kw_only=True)
class Serving(EngineConfig):
    """What every serving run shares: the weights it serves, in micro-batches."""

    schedule: str = "inference"  # a forward-only kind
    model: str | Callable = "gpt"  # gpt | mlp | your own (see models/custom.py)
    state: dict | None = None  # weights, named as nn.Sequential(*task.layers()) names them:
    # RunResult.state. None: the seed's initial (untrained) weights
    microbatch: int = 4  # requests (or sequences) per micro-batch

    @property
    def batch_size(self) -> int:
        """The rows of the model's own data a batch holds (models.task_of): one micro-batch."""
        return self.microbatch


@named_fields
@dataclass(kw_only=True)
class ServeConfig(Serving):
    """A stream of requests; see sim/request_stream.Stream for how they arrive and are grouped."""

    requests: int = 32
    rate: float | None = None  # requests per second; None: all at once
    arrivals: str = "even"  # even | poisson
    inputs: Any = None  # a tensor, one row per request; None: rows of the model's own data
    keep_outputs: bool = True  # bring every request's output back (False: only the times)

    @property
    def stream(self) -> Stream:
        n = len(self.inputs) if self.inputs is not None else self.requests
        return Stream(n, self.microbatch, self.rate, self.arrivals, self.seed)


@named_fields
@dataclass(kw_only=True)
class GenerateConfig(Serving):
    """Greedy generation: `new_tokens` tokens after each prompt."""

    prompts: Any = None  # lists of token ids, all of one length; None: 4 prompts of 4 tokens
    # from the model's own data
    new_tokens: int = 8
    microbatch: int = 1  # sequences per micro-batch; more micro-batches, more overlap
