"""Exercise: pass the baton. The learner writes one stage's receive-compute-send for forward and
backward, `stage_step(stage, baton)` (minipipe/engine/baton.py); it runs first here, every stage in one
process with the messages in a dict (quick, and clear about what went wrong), then inside real
worker processes, checked by gradients against the whole model."""
from __future__ import annotations

import torch

from ...engine.stage_step import Baton
from ...sim.pipeline import simulate
from .guard import ask, stage_steps
from .runs import TINY, run_real
from .verdict import Mistake, verdict

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


def _compare(grads: dict, right: dict, where: str, stage_of, m: int) -> None:
    wrong = []
    for name, g in right.items():
        mine = grads.get(name)
        if mine is None:
            raise Mistake(f"{where}: {name} (stage {stage_of(name)}) got no gradient. Every stage's backward must run "
                          f"autograd from the output its forward kept, with the gradient it received")
        if not torch.allclose(mine, g, rtol=RTOL, atol=ATOL):
            wrong.append(name)
    if not wrong:
        return
    stages = sorted({stage_of(n) for n in wrong})
    ratio = _ratio(grads[wrong[-1]], right[wrong[-1]])
    if abs(ratio - m) < 1e-2 * m:
        hint = (f" They are m = {m} times the whole model's: the last stage must divide each micro-batch's loss by "
                f"m (stage.m), so that the m backwards add up to the batch's mean.")
    elif stages == [0]:
        hint = (" The last stage's are right, stage 0's are not: what went back across the cut is not the gradient "
                "of stage 1's input. In the forward make the received input a leaf that requires grad; in the "
                "backward send its .grad.")
    else:
        hint = ""
    raise Mistake(f"{where}: the gradients of stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))} "
                  f"differ from the whole model's ({', '.join(wrong[:3])}{', ...' if len(wrong) > 3 else ''}).{hint}")


def _in_one_process(stage_step, kind: str) -> str:
    from ...engine.config import prepare
    from ...engine.stage import Stage
    from ...engine.partition import stage_module
    from ...models.catalog import task_of

    config = _config(kind)
    plan = prepare(config)
    s, cut = plan.schedule, plan.partition
    task, n, m = task_of(plan.config), plan.schedule.n_stages, plan.schedule.m
    layers = task.layers()
    x, y = task.batch(0)
    inputs, targets = list(x.chunk(m)), list(y.chunk(m))
    stages = {k: Stage(k, stage_module(layers, cut, k), n, m, task.loss) for k in range(n)}
    box: dict = {}

    def take(producer, action):
        if producer not in box:
            raise RuntimeError(f"{action}: {producer} sent nothing (its stage_step never called baton.send())")
        return box.pop(producer)

    order = sorted(simulate(s).events, key=lambda e: (e.start, e.rank))    # one order the ranks' lists allow
    for e in order:
        a = e.action
        baton = Baton(a, stages[a.stage], inputs, targets, take, box.__setitem__, s.gradient_op, plan.shapes)
        ask(stage_step, stages[a.stage], baton, answers=stage_steps(),
            advice="write the receive, the compute and the send yourself",
            name=f"stage_step on {a} ({'forward' if a.op == 'F' else 'backward'} of micro-batch {a.mb} on stage {a.stage})")
        try:
            baton.finish()
        except RuntimeError as err:
            raise Mistake(str(err)) from None
    for st in stages.values():
        if st.saved:
            raise Mistake(f"at the end of the step stage {st.index} still keeps micro-batches {sorted(st.saved)} in "
                          f"stage.saved: the backward must take out (pop) what its forward kept, or memory grows "
                          f"every step")
    right_loss, right = _whole(config)
    loss = sum(float(v) for v in stages[n - 1].losses.values())
    grads = {}
    for k, st in stages.items():
        for name, p in st.module.named_parameters():
            local, rest = name.split(".", 1)
            grads[f"{cut.layers_of(k)[int(local)]}.{rest}"] = p.grad
    layer_stage = {i: k for k in range(n) for i in cut.layers_of(k)}
    stage_of = lambda name: layer_stage[int(name.split(".", 1)[0])]   # noqa: E731
    _compare(grads, right, f"{kind}, p=2, m={m}, in one process", stage_of, m)
    if abs(loss - right_loss) > RTOL * abs(right_loss):
        hint = " That is m times the mean: divide each micro-batch's loss by m." if abs(loss - m * right_loss) < 1e-3 \
            else ""
        raise Mistake(f"the losses sent by the last stage add up to {loss:.6f}; the whole batch's mean loss is "
                      f"{right_loss:.6f}.{hint}")
    return f"{kind}: the whole model's loss and gradients"


def _real(stage_step) -> str:
    config = _config("1f1b", stage_step)
    result = run_real([config], ["your stage_step on 2 processes"])[0]
    _, right = _whole(config)
    cut = result.plan.partition
    layer_stage = {i: k for k in range(cut.n_stages) for i in cut.layers_of(k)}
    _compare(result.grads or {}, right, "on 2 real processes", lambda name: layer_stage[int(name.split(".", 1)[0])],
             config.m)
    return "1F1B on 2 worker processes: the whole model's losses and gradients"


def check_stage_step(stage_step) -> None:
    """Check the learner's stage_step(stage, baton): in one process under GPipe and 1F1B, then in
    the real workers, each against the whole model's gradients."""
    verdict([
        ("GPipe, every stage in this process", lambda: _in_one_process(stage_step, "gpipe")),
        ("1F1B, every stage in this process", lambda: _in_one_process(stage_step, "1f1b")),
        ("in real worker processes", lambda: _real(stage_step)),
    ])
