"""What a serving run adds to its Plan (`Plan.work`), worked out before any process starts."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..schedule.ops import Action
from ..sim.request_stream import Stream


@dataclass
class StreamWork:
    """A request stream: when the requests arrive, and their rows, padded to whole micro-batches
    (every message keeps one shape) with copies of the last."""

    stream: Stream
    inputs: torch.Tensor
    keep_outputs: bool = True  # bring every request's output back (False: only the times)


@dataclass
class GenerationWork:
    """Greedy generation: the prompts, padded to whole micro-batches, and the shapes of every
    round's messages (the context grows by a token a round, up to the model's window)."""

    prompts: torch.Tensor  # [sequences padded to whole micro-batches, prompt length]
    sequences: int  # how many prompts (the rest of `prompts` is padding)
    rounds: int  # tokens to generate
    per_round: int  # micro-batches in flight: one round's
    block: int  # the model's context window
    shapes_by_length: dict = field(default_factory=dict)  # context length -> each stage's output (shape, dtype)

    @property
    def microbatch(self) -> int:
        return len(self.prompts) // self.per_round

    def length(self, round_: int) -> int:
        """The context round `round_` runs on: the prompt and every token so far, at most `block`."""
        return min(self.prompts.shape[1] + round_, self.block)

    def shape_of(self, producer: Action) -> tuple:
        """The (shape, dtype) of the message `producer` sends (the Plan's shapes, as a function): an
        activation of its round's context length, or from the last stage the next tokens, one per
        sequence, fed back to stage 0 (schedule/rounds.py)."""
        by_stage = self.shapes_by_length[self.length(producer.mb // self.per_round)]
        if producer.stage == len(by_stage) - 1:
            return (self.microbatch,), torch.long
        return by_stage[producer.stage]
