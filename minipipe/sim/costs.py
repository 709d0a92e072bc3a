"""What the simulators charge: a `Costs` per op, per stage and per message.

Any unit of time (the traces call it ms), as long as latency and bandwidth use the same one.
`measured_costs.py` reads Costs off measured traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..fields import named_fields
from ..schedule.ops import ALL_OPS, OPS, Action

PerStage = float | Sequence[float]


@named_fields
@dataclass(frozen=True)
class Costs:
    """What one micro-batch costs (any unit; the trace calls it ms), and what the links cost.

    forward, backward: one number is a rank's share of the model — the same model whatever the
        schedule, so with v chunks per rank each chunk costs 1/v of it, and interleaving is
        compared with 1F1B on equal terms. A list gives every stage its own time (e.g. measured
        by measured_costs.py), taken as it is.
    weight: the part of `backward` that is the weight gradient (W), when a schedule splits a
        backward into I (input gradient, backward − weight) and W. Default: half of backward.
        It must not exceed backward.
    stage_scale: multipliers for chosen stages, e.g. {3: 1.5} makes stage 3 half again slower
        (every op on it: F, B, I and W).
    latency, bandwidth: each message costs latency + bytes / bandwidth.
    activation_bytes: bytes of one micro-batch's activation leaving each stage (gradients
        going back are the same size).
    overlap: for schedules that pair a forward with a backward (DualPipe-V's F&B), the share of
        the shorter of the two hidden under the longer: a pair costs F + B − overlap·min(F, B).
        0 (the default) is one stream, as on a CPU: the two run one after the other; on a GPU,
        with the pair's communication on its own stream, it comes near 1.
    recompute: the share of each stage's forward its backward runs again (activation
        recomputation, sim/recompute_costs.py): 1 for RunConfig(recompute="stage"), a chosen layers'
        share for layers, 0 (the default) for none. B and I cost that much more; W does not.

    A schedule's written sends, receives and FSDP actions (schedule/ops.py) take no time of their rank here:
    a message costs its latency and bytes on the way (from its send to the computation that
    waits for it), and FSDP's gathers and reductions run beside the computations.
    """

    forward: PerStage = 1.0
    backward: PerStage = 2.0
    weight: PerStage | None = None
    stage_scale: Mapping[int, float] | Sequence[float] = ()
    latency: float = 0.0
    bandwidth: float = math.inf
    activation_bytes: PerStage = 0.0
    overlap: float = 0.0
    recompute: PerStage = 0.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.weight, (int, float))
            and isinstance(self.backward, (int, float))
            and self.weight > self.backward
        ):
            raise ValueError(
                f"weight={self.weight} is the weight-gradient part of backward={self.backward}, so it "
                f"cannot exceed it; use weight <= {self.backward}"
            )
        if all(isinstance(x, (int, float)) and x == 0 for x in (self.forward, self.backward)):
            raise ValueError(
                "forward and backward are both 0: there is no work to schedule (and no bubble to "
                "measure); give at least one of them a time > 0"
            )
        if not 0 <= self.latency < math.inf or not self.bandwidth > 0:
            raise ValueError(f"latency must be >= 0 and bandwidth > 0, got {self.latency} and {self.bandwidth}")
        if not 0 <= self.overlap <= 1:
            raise ValueError(
                f"overlap is the share of a paired forward and backward hidden under each other, "
                f"from 0 (none) to 1 (all of the shorter one); got {self.overlap}"
            )

    def pair(self, table: dict[str, list[float]]) -> Callable[[int, Action, Action], float] | None:
        """The time of an overlapped forward-and-backward pair on its stages, for replay; None when
        nothing overlaps (the two ops' own times, one after the other)."""
        if not self.overlap:
            return None

        def pair(rank: int, f: Action, b: Action) -> float:
            a, c = table["F"][f.stage], table[b.op][b.stage]
            return a + c - self.overlap * min(a, c)

        return pair

    def table(self, n_stages: int, v: int = 1) -> dict[str, list[float]]:
        """Compute time of F, B, I and W on each of `n_stages` stages, v of them per rank (and of
        every other op type: none)."""
        scale = [1.0] * n_stages
        items = self.stage_scale.items() if isinstance(self.stage_scale, Mapping) else enumerate(self.stage_scale)
        for s, k in items:
            if not 0 <= s < n_stages:
                raise ValueError(f"stage_scale names stage {s}, but stages are 0..{n_stages - 1}")
            if not 0 < k < math.inf:
                raise ValueError(f"stage_scale for stage {s} must be a finite number > 0, got {k}")
            scale[s] = float(k)
        f = per_stage(self.forward, n_stages, "forward", v)
        b = per_stage(self.backward, n_stages, "backward", v)
        w = per_stage(self.weight, n_stages, "weight", v) if self.weight is not None else [x / 2 for x in b]
        for s, (x, y) in enumerate(zip(b, w)):
            if y > x:
                raise ValueError(
                    f"stage {s}: the weight gradient ({y:g}) is part of the backward ({x:g}) and cannot "
                    f"exceed it; lower weight or raise backward"
                )
        redo = [x * r for x, r in zip(f, _shares(self.recompute, n_stages))]  # a recomputing backward: F_r + B
        return {
            "F": [x * k for x, k in zip(f, scale)],
            "B": [(x + r) * k for x, r, k in zip(b, redo, scale)],
            "I": [(x - y + r) * k for x, y, r, k in zip(b, w, redo, scale)],
            "W": [y * k for y, k in zip(w, scale)],
            **{op: [0.0] * n_stages for op in ALL_OPS if op not in OPS},
        }


def _shares(value: PerStage, n: int) -> list[float]:
    shares = [float(value)] * n if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(shares) != n or any(not 0 <= x <= 1 for x in shares):
        raise ValueError(
            f"recompute is the share of each stage's forward run again, from 0 to 1: one number or one "
            f"per stage ({n}); got {value!r}"
        )
    return shares


def per_stage(value: PerStage, n: int, name: str, v: int = 1) -> list[float]:
    """One number is a rank's share, split over its v chunks; a list is per stage, as given."""
    given: list[object]
    try:
        given = [value] if isinstance(value, (int, float, str, bytes)) else list(value)
    except TypeError:
        given = [value]
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in given):
        raise ValueError(f"{name} costs are one number, or one per stage; got {repr(value)[:80]}")
    values = [float(value) / v] * n if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(values) != n:
        raise ValueError(f"{name} costs: got {len(values)} values for {n} stages; give one number or one per stage")
    if any(not 0 <= x < math.inf for x in values):
        raise ValueError(f"{name} costs must be finite numbers >= 0, got {values}")
    return values
