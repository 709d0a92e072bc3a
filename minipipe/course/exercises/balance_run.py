"""Exercise 08's measured run: the learner's cut of lesson 06's GPT trained on 2 processes beside the
cut by parameters, with how long each rank was busy and idle (balance.py's last check). The GPT and
the run's sizes are here, the cut's checks read them (balance.py)."""

from __future__ import annotations

import statistics

from torch import nn

from ...models.catalog import make_task
from ..i18n.messages import say as _
from .runs import run_real

# lesson 06's GPT: the embedding holds many parameters and does no math, the head does the most
GPT = dict(vocab=1536, width=32, block=64, depth=3)
BATCH, M, P = 64, 8, 2


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


def measured(mine: tuple[int, ...]) -> str:
    """Train the GPT with the cut `mine` and with the cut by parameters, the whole model's losses
    compared; what each rank did, for the verdict's note."""
    from ...engine.config import RunConfig

    common = dict(schedule="1f1b", p=P, m=M, batch_size=BATCH, steps=4, timeout=60.0, startup_timeout=120.0)
    configs = [
        RunConfig(model=f"{__name__}:Grouped", model_args={"bounds": list(mine), **GPT}, **common),
        RunConfig(model="gpt", model_args=GPT, partition="params", **common),
    ]
    results = run_real(configs, [_("your cut"), _("the parameter cut")], rtol=1e-4)
    lines = []
    for label, res in zip(("yours", "by parameters"), results):
        traces = res.traces[1:]  # the first step warms up
        busy = [statistics.median(t.busy(r) for t in traces) for r in range(P)]
        idle = [statistics.median(t.bubble_per_rank()[r] for t in traces) for r in range(P)]
        bounds = mine if label == "yours" else res.plan.partition.bounds
        lines.append(
            _(
                "{label} {bounds}: busy {busy}; idle {idle}",
                label=_("yours") if label == "yours" else _("by parameters"),
                bounds=tuple(bounds),
                busy=", ".join(_("rank {r} {ms:.0f} ms", r=r, ms=b) for r, b in enumerate(busy)),
                idle=", ".join(f"{100 * x:.0f} %" for x in idle),
            )
        )
    return (
        _("the whole model's losses, measured (median of 3 steps; times on a busy machine vary):")
        + "\n      "
        + "\n      ".join(lines)
    )
