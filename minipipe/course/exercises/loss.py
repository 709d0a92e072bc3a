"""Exercise: scale the loss. The learner accumulates gradients over m micro-batches so that they
equal the whole batch's; checked against the whole model's one backward, in plain torch, and by
watching the learner's own calls: m forwards of one micro-batch each, each followed by its own
backward, whose gradient at the model's output is that of the micro-batch's loss divided by m.
The learner's function runs in the sandbox (grading/), on the checker's model there, watched by a
harness (`_run`) that sends back the gradients, the returned loss and the model's calls; the
reference, the comparisons and the diagnoses are the judge's. The engine's own stage (which
divides by m for you) is not on the exercise's list (ALLOWED)."""

from __future__ import annotations

import torch

from ...models.catalog import make_task
from ..grading.harness import harness
from ..i18n.messages import say as _
from .guard import in_sandbox
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the course models (the model and its loss), not
# the engine's stage, which divides by m for you
ALLOWED = ("minipipe.models",)
RTOL, ATOL = 1e-4, 1e-6


@harness
def _model(name: str):
    task = make_task(name, batch_size=32, seed=3, **({"width": 16, "depth": 3} if name == "mlp" else {"depth": 2}))
    return task, torch.nn.Sequential(*task.layers())


@harness
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
    whole_loss, whole = _reference(task, model, x, y)
    ratio = float(mine @ whole / (whole @ whole))
    if abs(ratio - m) < 1e-3 * m:
        return " " + _(
            "Yours are m = {m} times too large: each micro-batch's loss is already a mean over its own rows, "
            "and backward adds the m gradients up. Divide each micro-batch's loss by m, so that the m of them "
            "add up to the batch's mean.",
            m=m,
        )
    if m > 1 and abs(ratio - 1 / m) < 1e-3 / m:
        return " " + _("Yours are 1/m = 1/{m} of the right ones: the loss was divided by m twice (by m² in all).", m=m)
    rows = x.shape[0] // m  # 32 rows: every m checked divides them
    if abs(ratio - 1 / rows) < 1e-3 / rows:
        return " " + _(
            "Yours are scaled by 1/{rows}, one over the micro-batch's rows: the loss function already "
            "averages over rows; divide by the number of micro-batches, m = {m}.",
            rows=rows,
            m=m,
        )
    last_loss, last = _reference(task, model, x.chunk(m)[-1], y.chunk(m)[-1])
    for scale in (1.0, 1 / m):
        if torch.allclose(mine, scale * last, rtol=1e-3, atol=1e-6):
            return " " + _(
                "Yours are the last micro-batch's alone: the gradients of the earlier ones were thrown away. "
                "Zero the gradients once, before the loop (here they arrive empty), never inside it."
            )
    return ""


@harness
def _run(accumulate, name: str, m: int, watch: bool) -> dict:
    """In the sandbox: the learner's accumulate on the checker's model and batch; what the judge
    needs to see of it (the model's calls only when `watch`)."""
    task, model = _model(name)
    x, y = task.batch(0)
    model.zero_grad(set_to_none=True)
    watched = _Watched(model) if watch else None
    try:
        value = accumulate(model, task.loss, x, y, m)
    finally:
        if watched is not None:
            watched.close()
    if torch.is_tensor(value) and value.numel() == 1:
        value = value.item()
    out = {"value": value, "grads": _flat(model)}
    if watched is not None:
        out.update(log=watched.log, inputs=watched.inputs, outputs=watched.outputs, grads_at_outputs=watched.grads)
    return out


def _accumulate(accumulate, name: str, m: int, watch: bool = False) -> dict:
    return in_sandbox(
        _run,
        [accumulate],
        name,
        m,
        watch,
        name="accumulate",
        advice=_("run the micro-batches through the model yourself"),
    )


@harness
class _Watched:
    """Hooks on the model that log its calls: each forward (its input and output), and each
    backward that reaches a forward's output (the gradient there)."""

    def __init__(self, model):
        self.log: list[tuple[str, int]] = []  # ("F", i) and ("B", i), in the order they ran
        self.inputs, self.outputs, self.grads = [], [], {}
        self.handle = model.register_forward_hook(self._forward)

    def _forward(self, module, args, output):
        if not (torch.is_tensor(output) and output.requires_grad):
            return  # a forward under no_grad keeps nothing for backward
        i = len(self.inputs)
        self.inputs.append(args[0].detach())
        self.outputs.append(output.detach())
        self.log.append(("F", i))
        output.register_hook(lambda g, i=i: self._backward(i, g))

    def _backward(self, i, grad):
        self.log.append(("B", i))
        self.grads[i] = self.grads.get(i, 0) + grad.detach()

    def close(self):
        self.handle.remove()


class _Seen:
    """What the harness saw of the model's calls (a log of ("F", i) and ("B", i)), as the judge holds it."""

    def __init__(self, log, inputs, outputs, grads):
        self.log, self.inputs, self.outputs, self.grads = [tuple(e) for e in log], inputs, outputs, grads


def _rows_of(part: torch.Tensor, whole: torch.Tensor) -> list[int] | None:
    """Which rows of `whole` the micro-batch `part` is (None if it is not made of them)."""
    rows = []
    for row in part:
        same = (whole == row).reshape(whole.shape[0], -1).all(dim=1).nonzero()
        if len(same) == 0:
            return None
        rows.append(int(same[0]))
    return rows


def _each_microbatch(accumulate, name: str = "mlp", m: int = 4) -> str:
    task, unused_model = _model(name)
    x, y = task.batch(0)
    got = _accumulate(accumulate, name, m, watch=True)
    watched = _Seen(got["log"], got["inputs"], got["outputs"], got["grads_at_outputs"])
    n, rows = len(watched.inputs), x.shape[0] // m
    if n == 0:
        raise Mistake(
            _(
                "accumulate never called model(...) on a micro-batch (m={m}); run each micro-batch through the "
                "model it was given",
                m=m,
            )
        )
    sizes = [int(t.shape[0]) for t in watched.inputs]
    if n == 1 and sizes[0] == x.shape[0]:
        raise Mistake(
            _(
                "with m={m}, accumulate ran the model once, on the whole batch of {batch} rows. Gradient "
                "accumulation runs it on each of the m micro-batches ({rows} rows each), one after another, so "
                "that only one micro-batch's activations are held at a time",
                m=m,
                batch=x.shape[0],
                rows=rows,
            )
        )
    if n != m or any(size != rows for size in sizes):
        raise Mistake(
            _(
                "with m={m} and a batch of {batch} rows, accumulate ran the model {n} time(s), on "
                "{sizes} rows; run it once on each micro-batch of {rows} rows (x.chunk(m)).",
                m=m,
                batch=x.shape[0],
                n=n,
                sizes=", ".join(map(str, sizes)),
                rows=rows,
            )
            + _split_not_chunked(sizes, x.shape[0], m)
        )
    seen = sorted(r for t in watched.inputs for r in (_rows_of(t, x) or [-1]))
    if seen != list(range(x.shape[0])):
        raise Mistake(
            _(
                "with m={m}, the model's inputs are not the batch's rows, each once: chunk x into m "
                "micro-batches and run each of them",
                m=m,
            )
        )
    want = [event for i in range(m) for event in (("F", i), ("B", i))]
    if watched.log != want:
        order = " ".join(f"{op}{i}" for op, i in watched.log)
        if [op for op, _mb in watched.log] == ["F"] * m + ["B"] * m:
            why = " " + _(
                "Every forward ran before any backward: one backward over the sum of the losses gives the same "
                "gradients, but holds all m micro-batches' activations at once, which is what accumulation avoids."
            )
        else:
            why = ""
        raise Mistake(
            _(
                "with m={m}, the micro-batches' forwards (F) and backwards (B) ran in the order {order}; each "
                "micro-batch's backward must run once, right after its forward: {want}.",
                m=m,
                order=order,
                want=" ".join(f"{op}{i}" for op, i in want),
            )
            + why
        )
    for i in range(m):
        out = watched.outputs[i].clone().requires_grad_()
        target = y[_rows_of(watched.inputs[i], x)]
        (expected,) = torch.autograd.grad(task.loss(out, target) / m, out)
        got = watched.grads[i]
        ratio = float((got * expected).sum() / (expected * expected).sum())
        if not torch.allclose(got, expected, rtol=RTOL, atol=ATOL):
            scale = " " + _("It is {ratio:.3g} times the gradient of the micro-batch's loss divided by m.", ratio=ratio)
            if abs(ratio - m) < 1e-3 * m:
                scale = " " + _(
                    "It is the gradient of the micro-batch's loss itself: m = {m} times too large. Divide each "
                    "micro-batch's loss by m before its backward.",
                    m=m,
                )
            raise Mistake(
                _(
                    "with m={m}, the gradient that micro-batch {i}'s backward brought to the model's output is not "
                    "that of its loss divided by m.",
                    m=m,
                    i=i,
                )
                + scale
            )
    return _("m={m}: {m} forwards of {rows} rows, each followed by its own backward of the loss / m", m=m, rows=rows)


def _split_not_chunked(sizes: list[int], batch: int, m: int) -> str:
    """The hint for x.split(m) where x.chunk(m) is meant: pieces of m rows, not m pieces."""
    if len(sizes) != m and len(sizes) == -(-batch // m) and all(size == m for size in sizes[:-1]):
        return " " + (
            _(
                "Your accumulate ran the model on {n} pieces of {m} rows: x.split(m) cuts pieces of m rows each; "
                "x.chunk(m) cuts m pieces, here {m} micro-batches of {rows} rows, as the task asks.",
                n=len(sizes),
                m=m,
                rows=batch // m,
            )
            if m > 1
            else _(
                "Your accumulate ran the model on {n} pieces of {m} row: x.split(m) cuts pieces of m rows each; "
                "x.chunk(m) cuts m pieces, here {m} micro-batch of {rows} rows, as the task asks.",
                n=len(sizes),
                m=m,
                rows=batch // m,
            )
        )
    return ""


def _grads(accumulate, name: str, ms=(1, 2, 4, 8)) -> str:
    task, model = _model(name)
    x, y = task.batch(0)
    right_loss, right = _reference(task, model, x, y)
    for m in ms:
        got = _accumulate(accumulate, name, m, watch=True)
        mine = got["grads"]
        pieces = _split_not_chunked([int(t.shape[0]) for t in got["inputs"]], x.shape[0], m)
        if mine is None:
            raise Mistake(
                _(
                    "with m={m}, some parameters have no gradient after accumulate(): call backward() on each "
                    "micro-batch's loss",
                    m=m,
                )
            )
        if not torch.allclose(mine, right, rtol=RTOL, atol=ATOL):
            err = float((mine - right).abs().max())
            raise Mistake(
                _(
                    "{name}, batch of {batch} rows in m={m} micro-batches: the gradients differ from the "
                    "whole batch's by up to {err:.3g} (whole batch: largest {largest:.3g}).",
                    name=name,
                    batch=x.shape[0],
                    m=m,
                    err=err,
                    largest=float(right.abs().max()),
                )
                + (pieces or _diagnose(mine, task, model, x, y, m))
            )
    return _("the {name} model, m = {ms}", name=name, ms=", ".join(map(str, ms)))


def _loss(accumulate) -> str:
    task, model = _model("mlp")
    x, y = task.batch(0)
    right, right_grads = _reference(task, model, x, y)
    for m in (2, 4):
        value = _accumulate(accumulate, "mlp", m)["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Mistake(
                _(
                    "accumulate returned {kind} {value!r:.40}; return the batch's mean loss, a number",
                    kind=type(value).__name__,
                    value=value,
                )
            )
        if abs(value - right) > RTOL * abs(right) + ATOL:
            hint = (
                " "
                + _(
                    "That is m times the mean: the sum of the micro-batches' own means. Return the sum of the "
                    "scaled losses."
                )
                if abs(value - m * right) < 1e-3 * abs(m * right)
                else ""
            )
            raise Mistake(
                _(
                    "with m={m} accumulate returned {value:.6f}; the whole batch's mean loss is {right:.6f}.",
                    m=m,
                    value=value,
                    right=right,
                )
                + hint
            )
    return _("the whole batch's mean loss, {right:.4f}", right=right)


def check_loss_scaling(accumulate) -> None:
    """Check the learner's accumulate(model, loss_fn, x, y, m) against one backward of the whole batch."""
    verdict(
        [
            (_("gradients equal the whole batch's (MLP, mean squared error)"), lambda: _grads(accumulate, "mlp")),
            (
                _("one forward and one backward per micro-batch, the loss divided by m"),
                lambda: _each_microbatch(accumulate),
            ),
            (_("the returned loss"), lambda: _loss(accumulate)),
            (
                _("gradients equal the whole batch's (GPT, cross-entropy over tokens)"),
                lambda: _grads(accumulate, "gpt"),
            ),
        ]
    )
