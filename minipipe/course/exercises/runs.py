"""What several checkers share: real runs on worker processes compared with the independent
reference, the whole model trained on one process in plain torch.

Real runs are small (2 ranks, a tiny MLP, 2 steps) so that every exercise checks in seconds on a
2-core CPU, and they come last in a checker: a schedule reaches processes only once it is proven
to run.
"""

from __future__ import annotations

import torch

from ..i18n.messages import say as _
from .verdict import Mistake

# the run every schedule exercise ends with: fast, and still several layers per stage
TINY = dict(
    model="mlp", model_args={"width": 32, "depth": 3}, batch_size=16, steps=2, timeout=30.0, startup_timeout=120.0
)


def whole_model_losses(config) -> list[float]:
    """The reference: the unsplit model, full batch, same optimizer, on this process."""
    from ...models.catalog import task_of

    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    opt = (torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=config.lr)
    losses = []
    for step in range(config.steps):
        x, y = task.batch(step)
        opt.zero_grad(set_to_none=True)
        loss = task.loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_real(configs: list, labels: list[str], rtol: float = 1e-5):
    """Train each config on worker processes (one launch for all) and compare its losses with the
    whole model's; returns the RunResults. A failed run or a loss that differs is a Mistake."""
    from ...engine.diagnosis import WorkerError
    from ...engine.launch import run_many

    try:
        results = run_many(configs)
    except (WorkerError, ValueError) as e:
        raise Mistake(_("the real run failed: {error}", error=e)) from None
    for label, config, result in zip(labels, configs, results):
        want = whole_model_losses(config)
        for step, (mine, right) in enumerate(zip(result.losses, want)):
            if abs(mine - right) > rtol * max(1.0, abs(right)):
                raise Mistake(
                    _(
                        "{label}: the loss of step {step} is {mine:.6f} on the pipeline, {right:.6f} for the "
                        "whole model on one process; they must be equal",
                        label=label,
                        step=step,
                        mine=mine,
                        right=right,
                    )
                )
    return results
