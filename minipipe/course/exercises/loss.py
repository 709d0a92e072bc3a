"""Exercise 05: scale the loss. The learner accumulates gradients over m micro-batches so that they
equal the whole batch's; checked against the whole model's one backward, in plain torch."""
from __future__ import annotations

import torch

from ...models.catalog import make_task
from .verdict import Mistake, call, verdict

RTOL, ATOL = 1e-4, 1e-6


def _model(name: str):
    task = make_task(name, batch_size=32, seed=3, **({"width": 16, "depth": 3} if name == "mlp" else {"depth": 2}))
    return task, torch.nn.Sequential(*task.layers())


def _flat(model) -> torch.Tensor | None:
    grads = [p.grad for p in model.parameters()]
    if any(g is None for g in grads):
        return None
    return torch.cat([g.reshape(-1) for g in grads])


def _reference(task, model, x, y, chunks: slice | None = None):
    model.zero_grad(set_to_none=True)
    loss = task.loss(model(x), y)
    loss.backward()
    g = _flat(model)
    model.zero_grad(set_to_none=True)
    return loss.item(), g


def _diagnose(mine: torch.Tensor, task, model, x, y, m: int) -> str:
    _, whole = _reference(task, model, x, y)
    ratio = float(mine @ whole / (whole @ whole))
    if abs(ratio - m) < 1e-3 * m:
        return (f" Yours are m = {m} times too large: each micro-batch's loss is already a mean over its own rows, "
                f"and backward adds the m gradients up. Divide each micro-batch's loss by m, so that the m of them "
                f"add up to the batch's mean.")
    if m > 1 and abs(ratio - 1 / m) < 1e-3 / m:
        return f" Yours are 1/m = 1/{m} of the right ones: the loss was divided by m twice (by m² in all)."
    rows = x.shape[0] // m
    if abs(ratio - 1 / rows) < 1e-3 / rows or abs(ratio - m / x.shape[0]) < 1e-3 * m / x.shape[0]:
        return (f" Yours are scaled by 1/{rows}, one over the micro-batch's rows: the loss function already "
                f"averages over rows; divide by the number of micro-batches, m = {m}.")
    _, last = _reference(task, model, x.chunk(m)[-1], y.chunk(m)[-1])
    for scale in (1.0, 1 / m):
        if torch.allclose(mine, scale * last, rtol=1e-3, atol=1e-6):
            return (" Yours are the last micro-batch's alone: the gradients of the earlier ones were thrown away. "
                    "Zero the gradients once, before the loop (here they arrive empty), never inside it.")
    return ""


def _grads(accumulate, name: str, ms=(1, 2, 4, 8)) -> str:
    task, model = _model(name)
    x, y = task.batch(0)
    right_loss, right = _reference(task, model, x, y)
    for m in ms:
        model.zero_grad(set_to_none=True)
        call(accumulate, model, task.loss, x, y, m, name="accumulate")
        mine = _flat(model)
        if mine is None:
            raise Mistake(f"with m={m}, some parameters have no gradient after accumulate(): call backward() on each "
                          f"micro-batch's loss")
        if not torch.allclose(mine, right, rtol=RTOL, atol=ATOL):
            err = float((mine - right).abs().max())
            raise Mistake(f"{name}, batch of {x.shape[0]} rows in m={m} micro-batches: the gradients differ from the "
                          f"whole batch's by up to {err:.3g} (whole batch: largest {float(right.abs().max()):.3g})."
                          + _diagnose(mine, task, model, x, y, m))
    return f"the {name} model, m = {', '.join(map(str, ms))}"


def _loss(accumulate) -> str:
    task, model = _model("mlp")
    x, y = task.batch(0)
    right, _ = _reference(task, model, x, y)
    for m in (2, 4):
        model.zero_grad(set_to_none=True)
        value = call(accumulate, model, task.loss, x, y, m, name="accumulate")
        if torch.is_tensor(value):
            value = value.item() if value.numel() == 1 else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Mistake(f"accumulate returned {type(value).__name__} {value!r:.40}; return the batch's mean loss, "
                          f"a number")
        if abs(value - right) > RTOL * abs(right) + ATOL:
            hint = (" That is m times the mean: the sum of the micro-batches' own means. Return the sum of the "
                    "scaled losses." if abs(value - m * right) < 1e-3 * abs(m * right) else "")
            raise Mistake(f"with m={m} accumulate returned {value:.6f}; the whole batch's mean loss is {right:.6f}.{hint}")
    return f"the whole batch's mean loss, {right:.4f}"


def check_loss_scaling(accumulate) -> None:
    """Check the learner's accumulate(model, loss_fn, x, y, m) against one backward of the whole batch."""
    verdict([
        ("gradients equal the whole batch's (MLP, mean squared error)", lambda: _grads(accumulate, "mlp")),
        ("the returned loss", lambda: _loss(accumulate)),
        ("gradients equal the whole batch's (GPT, cross-entropy over tokens)", lambda: _grads(accumulate, "gpt")),
    ])
