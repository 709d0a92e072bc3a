"""Exercise: pass the baton. The learner writes one stage's receive-compute-send for forward and
backward, `stage_step(stage, baton)` (minipipe/engine/stage_step.py); it runs first in the sandbox, every
stage in that one process with the messages in a dict (quick, and clear about what went wrong), then
inside real worker processes that the sandbox starts and that watch it as the sandbox does. The
judge compares the losses and gradients that come back with the whole model's, computed here."""

from __future__ import annotations

import torch

from ...engine.stage_step import Baton
from ...sim.pipeline import simulate
from ..grading.harness import harness
from ..i18n.messages import say as _
from .guard import in_sandbox
from .runs import TINY, whole_model_losses
from .verdict import Mistake, Unfinished, verdict

# what the learner's code may call while the check calls it (grading/watch.py): the baton, its actions, the
# stage's model and loss, not the engine's own forward and backward
ALLOWED = ("minipipe.models", "minipipe.engine.stage_step.Baton", "minipipe.schedule.ops")
RTOL, ATOL = 1e-4, 1e-6


def _config(kind: str, fn=None):
    from ...engine.config import RunConfig

    return RunConfig(schedule=kind, p=2, m=4, stage_step=fn, return_grads=True, **TINY)


def _whole(config):
    """The whole model's loss and gradients on step 0's batch, by name as in nn.Sequential(*layers)."""
    from ...models.catalog import task_of

    task = task_of(config)
    model = torch.nn.Sequential(*task.layers())
    x, y = task.batch(0)
    loss = task.loss(model(x), y)
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters()}


def _ratio(mine: torch.Tensor, right: torch.Tensor) -> float:
    return float(mine.reshape(-1) @ right.reshape(-1) / (right.reshape(-1) @ right.reshape(-1)))


def _stage_of(config):
    """The stage that holds a parameter, by its name ("3.weight": layer 3's)."""
    cut = _partition(config)
    layer_stage = {i: k for k in range(cut.n_stages) for i in cut.layers_of(k)}
    return lambda name: layer_stage[int(name.split(".", 1)[0])]


def _compare(grads: dict, right: dict, where: str, stage_of, m: int) -> None:
    wrong = []
    for name, g in right.items():
        mine = grads.get(name)
        if mine is None:
            raise Mistake(
                _(
                    "{where}: {name} (stage {stage}) got no gradient. Every stage's backward must run "
                    "autograd from the output its forward kept, with the gradient it received",
                    where=where,
                    name=name,
                    stage=stage_of(name),
                )
            )
        if not torch.allclose(mine, g, rtol=RTOL, atol=ATOL):
            wrong.append(name)
    if not wrong:
        return
    stages = sorted({stage_of(n) for n in wrong})
    ratio = _ratio(grads[wrong[-1]], right[wrong[-1]])
    if abs(ratio - m) < 1e-2 * m:
        hint = " " + _(
            "They are m = {m} times the whole model's: the last stage must divide each micro-batch's loss by "
            "m (stage.m), so that the m backwards add up to the batch's mean.",
            m=m,
        )
    elif stages == [0]:
        hint = " " + _(
            "The last stage's are right, stage 0's are not: what went back across the cut is not the gradient "
            "of stage 1's input. In the forward make the received input a leaf that requires grad; in the "
            "backward send its .grad."
        )
    else:
        hint = ""
    fields = dict(
        where=where,
        stages=", ".join(map(str, stages)),
        names=", ".join(wrong[:3]) + (", ..." if len(wrong) > 3 else ""),
    )
    raise Mistake(
        (
            _("{where}: the gradients of stages {stages} differ from the whole model's ({names}).", **fields)
            if len(stages) > 1
            else _("{where}: the gradients of stage {stages} differ from the whole model's ({names}).", **fields)
        )
        + hint
    )


def _stages_in_sandbox(stage_step, kind: str) -> dict:
    """In the sandbox: every stage of the pipeline in this process, the learner's stage_step for
    each F and B in an order the ranks' lists allow (set up here, played by the harness `_play`)."""
    from ...engine.config import prepare
    from ...engine.partition import stage_module
    from ...engine.stage import Stage
    from ...models.catalog import task_of

    plan = prepare(_config(kind))
    s, cut = plan.schedule, plan.partition
    task, n, m = task_of(plan.config), plan.schedule.n_stages, plan.schedule.m
    layers = task.layers()
    x, y = task.batch(0)
    stages = {k: Stage(k, stage_module(layers, cut, k), n, m, task.loss) for k in range(n)}
    order = [e.action for e in sorted(simulate(s).events, key=lambda e: (e.start, e.rank))]
    layer_of = {k: list(cut.layers_of(k)) for k in range(n)}
    return _play(stage_step, stages, order, list(x.chunk(m)), list(y.chunk(m)), s.gradient_op, plan.shapes, layer_of)


@harness
def _play(stage_step, stages, order, inputs, targets, gradient_op, shapes, layer_of) -> dict:
    box: dict = {}

    def take(producer, action):
        if producer not in box:
            raise RuntimeError(
                _(
                    "{action}: {producer} sent nothing (its stage_step never called baton.send())",
                    action=action,
                    producer=producer,
                )
            )
        return box.pop(producer)

    for a in order:
        baton = Baton(a, stages[a.stage], inputs, targets, take, box.__setitem__, gradient_op, shapes)
        name = (
            _("stage_step on {a} (forward of micro-batch {mb} on stage {stage})", a=a, mb=a.mb, stage=a.stage)
            if a.op == "F"
            else _("stage_step on {a} (backward of micro-batch {mb} on stage {stage})", a=a, mb=a.mb, stage=a.stage)
        )
        try:
            stage_step(stages[a.stage], baton)
        except NotImplementedError:
            raise Unfinished("stage_step") from None
        except Exception as e:
            raise Mistake(
                _("{name} raised {kind}: {error}", name=name, kind=type(e).__name__, error=e), raised=e
            ) from None
        try:
            baton.finish()
        except RuntimeError as err:
            raise Mistake(str(err)) from None
    left = {st.index: sorted(st.saved) for st in stages.values() if st.saved}
    loss = sum(float(v) for v in stages[len(stages) - 1].losses.values())
    grads = {}
    for k, st in stages.items():
        for name, p in st.module.named_parameters():
            local, rest = name.split(".", 1)
            grads[f"{layer_of[k][int(local)]}.{rest}"] = None if p.grad is None else p.grad.detach()
    return {"left": left, "loss": loss, "grads": grads}


def _in_one_process(stage_step, kind: str) -> str:
    config = _config(kind)
    got = in_sandbox(
        _stages_in_sandbox,
        [stage_step],
        kind,
        name="stage_step",
        advice=_("write the receive, the compute and the send yourself"),
    )
    for index, mbs in got["left"].items():
        raise Mistake(
            _(
                "at the end of the step stage {index} still keeps micro-batches {mbs} in stage.saved: the "
                "backward must take out (pop) what its forward kept, or memory grows every step",
                index=index,
                mbs=mbs,
            )
        )
    right_loss, right = _whole(config)
    m = config.m
    _compare(
        {k: v for k, v in got["grads"].items() if v is not None},
        right,
        _("{kind}, p=2, m={m}, in one process", kind=kind, m=m),
        _stage_of(config),
        m,
    )
    loss = got["loss"]
    if abs(loss - right_loss) > RTOL * abs(right_loss):
        hint = (
            " " + _("That is m times the mean: divide each micro-batch's loss by m.")
            if abs(loss - m * right_loss) < 1e-3
            else ""
        )
        raise Mistake(
            _(
                "the losses sent by the last stage add up to {loss:.6f}; the whole batch's mean loss is {right:.6f}.",
                loss=loss,
                right=right_loss,
            )
            + hint
        )
    return _("{kind}: the whole model's loss and gradients", kind=kind)


def _partition(config):
    from ...engine.config import prepare

    return prepare(config).partition


def _run_in_sandbox(stage_step) -> dict:
    """In the sandbox: train with the learner's stage_step on 2 worker processes, which watch it as
    the sandbox does (sandbox.in_worker); the losses and gradients, for the judge to compare."""
    from ...engine.diagnosis import WorkerError
    from ...engine.launch import run_many

    try:
        result = run_many([_config("1f1b", stage_step)])[0]
    except (WorkerError, ValueError) as e:
        raise Mistake(_("the real run failed: {error}", error=e)) from None
    return {"losses": list(result.losses), "grads": dict(result.grads or {})}


def _real(stage_step) -> str:
    config = _config("1f1b")
    got = in_sandbox(_run_in_sandbox, [stage_step], name=_("your stage_step on 2 processes"))
    for step, (mine, right) in enumerate(zip(got["losses"], whole_model_losses(config))):
        if abs(mine - right) > 1e-5 * max(1.0, abs(right)):
            raise Mistake(
                _(
                    "your stage_step on 2 processes: the loss of step {step} is {mine:.6f} on the pipeline, "
                    "{right:.6f} for the whole model on one process; they must be equal",
                    step=step,
                    mine=mine,
                    right=right,
                )
            )
    right_loss, right = _whole(config)
    _compare(got["grads"], right, _("on 2 real processes"), _stage_of(config), config.m)
    return _("1F1B on 2 worker processes: the whole model's losses and gradients")


def check_stage_step(stage_step) -> None:
    """Check the learner's stage_step(stage, baton): in one process under GPipe and 1F1B, then in
    the real workers, each against the whole model's gradients."""
    verdict(
        [
            (_("GPipe, every stage in this process"), lambda: _in_one_process(stage_step, "gpipe")),
            (_("1F1B, every stage in this process"), lambda: _in_one_process(stage_step, "1f1b")),
            (_("in real worker processes"), lambda: _real(stage_step)),
        ]
    )
