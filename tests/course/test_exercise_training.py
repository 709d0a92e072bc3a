"""The exercises about training on a pipeline (01 the loss, 05 memory, 06 the baton, 08 balance):
typical wrong answers are refused with the message that names the mistake, and the engine's own
answer, in several disguises, with the message that names the engine (in a watched sandbox, as when
graded); the balance checker is exact where it claims to be. Every wrong answer here is refused
before any worker process starts."""

import importlib

import pytest
import torch

from minipipe import RunConfig, run
from minipipe.course.exercises import (
    WrongAnswer,
    check_balance,
    check_loss_scaling,
    check_memory_budget,
    check_stage_step,
)
from minipipe.course.exercises.balance import judge, optimum, stage_costs
from minipipe.course.exercises.verdict import Mistake
from minipipe.engine.diagnosis import WorkerError
from tests.support.judged import direct, sandboxed


def wrong(check, *answer) -> str:
    """The verdict on a wrong answer, its lines unwrapped (the checker's logic alone)."""
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


def refused(check, *answer) -> str:
    """The verdict on an answer that asks the engine, in a watched sandbox."""
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check, *answer)
    return " ".join(str(info.value).split())


# -- 01 the loss --------------------------------------------------------------------------------
def _accumulate(scale):
    def accumulate(model, loss_fn, x, y, m):
        total = 0.0
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            loss = scale(loss_fn(model(xs), ys), m, xs)
            loss.backward()
            total += loss.item()
        return total

    return accumulate


def test_01_loss_not_divided_by_m():
    text = wrong(check_loss_scaling, _accumulate(lambda loss, m, xs: loss))
    assert "m = 2 times too large" in text and "Divide each micro-batch's loss by m" in text


def test_01_divided_by_m_twice():
    text = wrong(check_loss_scaling, _accumulate(lambda loss, m, xs: loss / m / m))
    assert "Yours are 1/m = 1/2 of the right ones: the loss was divided by m twice (by m² in all)." in text


def test_01_divided_by_the_rows_instead():
    assert "one over the micro-batch's rows" in wrong(
        check_loss_scaling, _accumulate(lambda loss, m, xs: loss / len(xs))
    )


def test_01_gradients_zeroed_inside_the_loop():
    def accumulate(model, loss_fn, x, y, m):
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            model.zero_grad()
            (loss_fn(model(xs), ys) / m).backward()
        return 0.0

    assert "the last micro-batch's alone" in wrong(check_loss_scaling, accumulate)


def test_01_one_backward_of_the_whole_batch_is_not_accumulation():
    def accumulate(model, loss_fn, x, y, m):
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss.item()

    assert "ran the model once, on the whole batch of 32 rows" in wrong(check_loss_scaling, accumulate)


def test_01_one_backward_of_the_summed_losses_holds_every_micro_batch():
    def accumulate(model, loss_fn, x, y, m):
        loss = sum(loss_fn(model(xs), ys) / m for xs, ys in zip(x.chunk(m), y.chunk(m)))
        loss.backward()
        return loss.item()

    assert "Every forward ran before any backward" in wrong(check_loss_scaling, accumulate)


def _stage_answer(get_stage):
    def accumulate(model, loss_fn, x, y, m):
        stage = get_stage()(0, model, 1, m, loss_fn)
        for i, (xs, ys) in enumerate(zip(x.chunk(m), y.chunk(m))):
            stage.forward(i, xs, ys)
            stage.backward(i)
        return float(sum(stage.losses.values()))

    return accumulate


@pytest.mark.distributed
@pytest.mark.parametrize(
    "get_stage",
    [
        lambda: importlib.import_module("minipipe.engine.stage").Stage,
        lambda: __import__("minipipe.engine.stage", fromlist=["Stage"]).Stage,
    ],
    ids=["importlib", "__import__"],
)
def test_01_the_engines_stage_is_refused(get_stage):
    assert "the engine's own stage forward and backward" in refused(check_loss_scaling, _stage_answer(get_stage))


# -- 05 memory ----------------------------------------------------------------------------------
def _largest_m(kind, p, budget, per_mb):
    if kind == "gpipe":
        return min(64, budget // per_mb)
    return 64 if p * per_mb <= budget else budget // per_mb


def test_05_1f1b_holding_p_on_every_rank():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else min(p, m)) * per_mb

    assert "it holds at most p − r" in wrong(check_memory_budget, peak_bytes, _largest_m)


def test_05_1f1b_forgetting_m_smaller_than_p():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else p - rank) * per_mb

    assert "only m micro-batches to hold" in wrong(check_memory_budget, peak_bytes, _largest_m)


def test_05_1f1b_budget_as_if_gpipe():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else min(p - rank, m)) * per_mb

    text = wrong(check_memory_budget, peak_bytes, lambda kind, p, budget, per_mb: min(64, budget // per_mb))
    assert "however large m is" in text


MEMORY_DISGUISES = {
    "theory": (
        lambda kind, p, m, rank, per_mb: (
            importlib.import_module("minipipe.schedule.theory").peak_inflight(kind, p, m, rank) * per_mb
        ),
        "the engine's own formulas",
    ),
    "the simulator": (
        lambda kind, p, m, rank, per_mb: (
            importlib.import_module("minipipe")
            .simulate(importlib.import_module("minipipe").make_schedule(kind, p, m))
            .peak_inflight()[rank]
            * per_mb
        ),
        "make_schedule",
    ),
    "the registry's formula": (
        lambda kind, p, m, rank, per_mb: (
            importlib.import_module("minipipe.schedule.kinds").KINDS[kind].peak_inflight(p, m, 1, rank) * per_mb
        ),
        "the engine's own formulas",
    ),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", MEMORY_DISGUISES)
def test_05_asking_the_engine_is_refused(disguise):
    fn, message = MEMORY_DISGUISES[disguise]
    assert message in refused(check_memory_budget, fn, _largest_m)


# -- 06 the baton -------------------------------------------------------------------------------
def _stage_step(scale=True, leaf=True, send_grad=True):
    def stage_step(stage, baton):
        if baton.op == "F":
            x = baton.inputs if stage.is_first else baton.receive()
            if leaf and not stage.is_first:
                x.requires_grad_()
            out = stage.module(x)
            if stage.is_last:
                out = stage.loss_fn(out, baton.target) / (stage.m if scale else 1)
            stage.saved[baton.mb] = (x, out)
            baton.send(out)
        else:
            x, out = stage.saved.pop(baton.mb)
            out.backward(None if stage.is_last else baton.receive())
            if not stage.is_first:
                baton.send(x.grad if send_grad else x.detach())  # the activation, not its gradient

    return stage_step


def test_06_loss_not_scaled():
    assert "m = 4 times the whole model's" in wrong(check_stage_step, _stage_step(scale=False))


def test_06_received_input_not_a_leaf():
    text = wrong(check_stage_step, _stage_step(leaf=False))
    assert "send() takes a tensor" in text and "x.requires_grad_()" in text


def test_06_wrong_gradient_sent_back():
    assert "not the gradient of stage 1's input" in wrong(check_stage_step, _stage_step(send_grad=False))


def _engine_step(stage, baton):
    if baton.op == "F":
        x = baton.inputs if stage.is_first else baton.receive()
        out = stage.forward(baton.mb, x, baton.target)
        baton.send(stage.losses[baton.mb] if stage.is_last else out)
    else:
        grad = stage.backward(baton.mb, None if stage.is_last else baton.receive())
        if not stage.is_first:
            baton.send(grad)


def _engine_step_unbound(stage, baton):
    Stage = importlib.import_module("minipipe.engine.stage").Stage
    if baton.op == "F":
        Stage.forward(stage, baton.mb, baton.inputs if stage.is_first else baton.receive(), baton.target)
    else:
        Stage.backward(stage, baton.mb)


@pytest.mark.distributed
@pytest.mark.parametrize("step", [_engine_step, _engine_step_unbound], ids=["bound method", "unbound, by import"])
def test_06_the_engines_stage_step_is_refused(step):
    assert "calls the engine's own stage forward" in refused(check_stage_step, step)


def test_06_hook_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="splits backward into I and W"):
        run(RunConfig(schedule="zb-h1", stage_step=_stage_step()))
    with pytest.raises(ValueError, match="stage_step must be a function"):
        run(RunConfig(stage_step="mine"))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_06_a_hook_that_never_sends_stops_the_run_naming_the_action():
    def stage_step(stage, baton):
        if baton.op == "F":
            x = baton.inputs if stage.is_first else baton.receive()
            stage.saved[baton.mb] = (x, stage.module(x))
        else:
            stage.saved.pop(baton.mb)

    with pytest.raises(WorkerError, match=r"0F0: the hook never called baton.send\(\)"):
        run(RunConfig(p=2, m=2, batch_size=8, steps=1, timeout=20.0, stage_step=stage_step))


# -- 08 balance: the checker is exact ----------------------------------------------------------------
def test_08_optimum_on_hand_computed_lists():
    assert optimum([5, 1, 1, 1, 1, 1], 2) == (5, (0, 1, 6))
    assert optimum([1, 2, 3, 4, 5], 2) == (9, (0, 3, 5))  # [1, 2, 3] | [4, 5]
    assert optimum([1, 2, 3, 4, 5], 3)[0] == 6  # [1, 2, 3] | [4] | [5]
    assert optimum([2.0], 1) == (2.0, (0, 1))
    assert stage_costs([1, 2, 3, 4, 5], (0, 2, 5)) == [3, 12]  # each stage exactly its layers


def test_08_every_tying_cut_is_accepted():
    for bounds in [(0, 1, 2, 4), (0, 2, 3, 4), (0, 1, 3, 4)]:  # [2, 2, 2, 2] in 3: the slowest is 4 in all
        judge(bounds, [2, 2, 2, 2], 3)
    judge((0, 2, 5), [1, 1, 0.001, 1, 1], 2)  # 2 | 2.001 ...
    judge((0, 3, 5), [1, 1, 0.001, 1, 1], 2)  # ... and 2.001 | 2 tie


def test_08_a_cut_a_layer_off_is_refused_and_its_costs_are_printed():
    with pytest.raises(Mistake) as info:
        judge((0, 2, 5), [1, 2, 3, 4, 5], 2)
    assert (
        "your cut (0, 2, 5) gives stages costing 3, 12, the slowest 12; the cut (0, 3, 5) gets the slowest "
        "down to 9 (6, 9)"
    ) in str(info.value)
    with pytest.raises(Mistake, match="slowest 10;"):
        judge((0, 4, 5), [1, 2, 3, 4, 5], 2)
    costs = [1, 1, 1e-6, 1, 1 + 2e-6]  # one layer off is worse by 1e-6 only
    judge((0, 3, 5), costs, 2)
    with pytest.raises(Mistake, match="the cut \\(0, 3, 5\\)"):
        judge((0, 2, 5), costs, 2)


def _by_count(costs, p):
    size, extra = divmod(len(costs), p)
    bounds = [0]
    for s in range(p):
        bounds.append(bounds[-1] + size + (s < extra))
    return bounds


def _params(layers, sample):
    return [sum(t.numel() for t in layer.parameters()) for layer in layers]


def _last_of_ties(costs, p):
    """Dynamic programming that keeps, on ties, the last cut it finds: not the one the checker prints."""
    n, prefix = len(costs), [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    best = [[float("inf")] * (n + 1) for _ in range(p + 1)]
    start = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for s in range(1, p + 1):
        for j in range(s, n + 1):
            for i in range(s - 1, j):
                slowest = max(best[s - 1][i], prefix[j] - prefix[i])
                if slowest <= best[s][j]:
                    best[s][j], start[s][j] = slowest, i
    bounds = [n]
    for s in range(p, 0, -1):
        bounds.append(start[s][bounds[-1]])
    return tuple(reversed(bounds))


def test_08_cut_by_layer_count():
    assert "as if every layer cost the same" in wrong(check_balance, _by_count, _params)


def test_08_an_optimal_cut_other_than_the_checkers_passes_the_cut_checks():
    text = wrong(check_balance, _last_of_ties, _params)  # stopped by the parameter counts, not by the cut
    assert "✗ 3/5 checks passed" in text and "a cut balanced in parameters is not balanced in time" in text


def test_08_stages_without_layers():
    assert "every stage gets at least one layer" in wrong(
        check_balance, lambda costs, p: [0] * p + [len(costs)], _params
    )


def test_08_bounds_of_the_wrong_count_or_ends_name_the_function_and_an_even_cut():
    said = wrong(check_balance, lambda costs, p: [0, len(costs)], _params)
    assert (
        "balance([1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 3) returned (0, 6); the bounds of 3 stages are 4 numbers from 0 to "
        "6, e.g. (0, 2, 4, 6) for equal layers" in said
    )


BALANCE_DISGUISES = {
    "the partitioner": (
        (lambda costs, p: importlib.import_module("minipipe.engine.partition").split_evenly(costs, p), _params),
        "the engine's own partitioner",
    ),
    "partition() by time": (
        (
            lambda costs, p: (
                importlib.import_module("minipipe.engine.partition")
                .partition([torch.nn.Identity()] * len(costs), p)
                .bounds
            ),
            _params,
        ),
        "the engine's own partitioner",
    ),
    "the profiler": (
        (
            _last_of_ties,
            lambda layers, sample: importlib.import_module("minipipe.engine.partition").profile_layers(layers, sample),
        ),
        "the engine's own profiler",
    ),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", BALANCE_DISGUISES)
def test_08_the_engines_cut_and_profiler_are_refused(disguise):
    fns, message = BALANCE_DISGUISES[disguise]
    assert message in refused(check_balance, *fns)
