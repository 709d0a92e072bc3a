"""The near misses of the training exercises (01 the loss, 05 memory, 06 the baton, 08 balance):
for each bound or condition of a checker, an answer wrong by the least that bound exists for,
refused by that very check with the message that names the mistake. Each docstring names the
loosening of the checker it was seen to go red on (planted, then restored). The layer costs of 08
are judged on the checker's own clock: its rule is tested here on measurements given by hand, at
its ratio and either side of it. Judged directly (no process), but for one test in a watched
sandbox (marked distributed): brute force stopped by 08's deadline under the watch."""

import math
import random
import re

import pytest
import torch

from minipipe.course.exercises import (
    WrongAnswer,
    balance,
    check_balance,
    check_loss_scaling,
    check_memory_budget,
    check_stage_step,
    layer_clock,
)
from minipipe.course.exercises.verdict import Mistake
from minipipe.models.catalog import make_task
from tests.support import judged
from tests.support.judged import direct, sandboxed


def wrong(check, *answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


# -- 01 the loss --------------------------------------------------------------------------------------
def _accumulate(
    scale=lambda loss, m: loss / m, pieces=lambda x, m: x.chunk(m), keep=lambda total, loss: total + loss, after=None
):
    def accumulate(model, loss_fn, x, y, m):
        total = 0.0
        for xs, ys in zip(pieces(x, m), pieces(y, m)):
            loss = scale(loss_fn(model(xs), ys), m)
            loss.backward()
            total = keep(total, loss.item())
        if after:
            after(model, m)
        return total

    return accumulate


def test_01_the_layers_run_by_hand_are_not_the_models_calls():
    """Right gradients from each layer called in turn, never model(...): the watch on the model's calls
    sees none. Planted: the message's m left unpassed (a KeyError from the message, not a verdict)."""

    def accumulate(model, loss_fn, x, y, m):
        total = 0.0
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            out = xs
            for layer in model:
                out = layer(out)
            loss = loss_fn(out, ys) / m
            loss.backward()
            total += loss.item()
        return total

    text = wrong(check_loss_scaling, accumulate)
    assert "accumulate never called model(...) on a micro-batch (m=4)" in text


def test_01_split_where_chunk_is_meant():
    """x.split(m): pieces of m rows. Planted: _grads without the _split_not_chunked hint."""
    text = wrong(check_loss_scaling, _accumulate(pieces=lambda x, m: x.split(m)))
    assert "✗ 0/4 checks passed" in text and "ran the model on 32 pieces of 1 row" in text
    assert "x.split(m) cuts pieces of m rows each; x.chunk(m) cuts m pieces" in text


def test_01_split_where_chunk_is_meant_with_the_loss_divided_by_its_pieces():
    """x.split(m) with the loss divided by the count of pieces: the gradients are the whole batch's,
    but the micro-batches are not m. Planted: _each_microbatch without the _split_not_chunked hint."""

    def accumulate(model, loss_fn, x, y, m):
        total, xs, ys = 0.0, x.split(m), y.split(m)
        for x_piece, y_piece in zip(xs, ys):
            loss = loss_fn(model(x_piece), y_piece) / len(xs)
            loss.backward()
            total += loss.item()
        return total

    text = wrong(check_loss_scaling, accumulate)
    assert "✓ gradients equal the whole batch's (MLP, mean squared error)" in text
    assert "Your accumulate ran the model on 8 pieces of 4 rows: x.split(m) cuts pieces of m rows each" in text


def test_01_a_scale_right_for_m_up_to_2_only():
    """The loss divided by min(m, 2). Planted: _grads over ms=(1, 2) (the per-micro-batch check
    then refuses it instead, with another message)."""
    text = wrong(check_loss_scaling, _accumulate(scale=lambda loss, m: loss / min(m, 2)))
    assert "✗ 0/4 checks passed" in text and "in m=4 micro-batches: the gradients differ" in text


def test_01_the_sum_right_but_each_backward_unscaled():
    """Each micro-batch's loss backward unscaled, every .grad divided by m afterwards: the sum is
    right, each backward m times too large. Planted: _each_microbatch's per-micro-batch gradient
    comparison left out."""

    def divide(model, m):
        for p in model.parameters():
            p.grad /= m

    text = wrong(check_loss_scaling, _accumulate(scale=lambda loss, m: loss, after=divide))
    assert "✗ 1/4 checks passed" in text and "micro-batch 0's backward brought to the model's output" in text
    assert "m = 4 times too large" in text


def test_01_two_micro_batches_per_backward():
    """F0 F1 B1 B0 F2 F3 B3 B2: two micro-batches' activations held at once, the gradients right.
    Planted: _each_microbatch comparing the counts of F and B instead of their order."""

    def accumulate(model, loss_fn, x, y, m):
        total, parts = 0.0, list(zip(x.chunk(m), y.chunk(m)))
        for pair in (parts[i : i + 2] for i in range(0, m, 2)):
            loss = sum(loss_fn(model(xs), ys) / m for xs, ys in pair)
            loss.backward()
            total += loss.item()
        return total

    text = wrong(check_loss_scaling, accumulate)
    assert "✗ 1/4 checks passed" in text and "in the order F0 F1 B1 B0 F2 F3 B3 B2" in text


def test_01_returning_the_last_micro_batchs_loss():
    """Planted: _loss over m in (1,) only, where the last micro-batch is the batch."""
    text = wrong(check_loss_scaling, _accumulate(keep=lambda total, loss: loss))
    assert "✗ 2/4 checks passed" in text and "with m=2 accumulate returned" in text


def test_01_returning_the_sum_of_the_unscaled_losses():
    text = wrong(check_loss_scaling, _unscaled_total)
    assert "✗ 2/4 checks passed" in text and "That is m times the mean" in text


def _unscaled_total(model, loss_fn, x, y, m):
    total = 0.0
    for xs, ys in zip(x.chunk(m), y.chunk(m)):
        loss = loss_fn(model(xs), ys)
        (loss / m).backward()
        total += loss.item()
    return total


# -- 05 memory ----------------------------------------------------------------------------------------
def _peak(kind, p, m, rank, per_mb, off=0):
    return (m if kind == "gpipe" else min(p - rank + off, m)) * per_mb


def _largest(kind, p, budget, per_mb):
    return max((m for m in range(1, 65) if all(_peak(kind, p, m, r, per_mb) <= budget for r in range(p))), default=0)


def test_05_1f1b_holding_its_warm_up_alone():
    """p − r − 1 micro-batches, one fewer than 1F1B's rank r holds. Planted: _formula's tolerance
    1e-6 × right made one micro-batch's bytes."""
    text = wrong(check_memory_budget, lambda *a: _peak(*a, off=-1), _largest)
    assert "✗ 0/3 checks passed" in text and "That is rank r's warm-up alone, p − r − 1 forwards" in text


def test_05_1f1b_holding_one_too_many():
    text = wrong(check_memory_budget, lambda *a: _peak(*a, off=+1), _largest)
    assert "✗ 0/3 checks passed" in text and "One too many: rank r's warm-up is p − r − 1 forwards" in text


def test_05_gpipe_beyond_the_exercises_64():
    """budget // bytes with no cap: right for every budget the drawn cases hold (up to 40
    micro-batches). Planted: BUDGET_LIMITS without its budget of M_MAX + 6 micro-batches."""

    def largest(kind, p, budget, per_mb):
        return budget // per_mb if kind == "gpipe" else _largest(kind, p, budget, per_mb)

    text = wrong(check_memory_budget, _peak, largest)
    assert "✗ 1/3 checks passed" in text and "you say m=70" in text and "m up to 64" in text


def test_05_a_budget_of_exactly_m_micro_batches_holds_them():
    """Strictly below the budget, not within it: wrong only where the budget is exactly m
    micro-batches' bytes. Planted: BUDGET_LIMITS without its exact budgets."""

    def largest(kind, p, budget, per_mb):
        return max((m for m in range(1, 65) if all(_peak(kind, p, m, r, per_mb) < budget for r in range(p))), default=0)

    text = wrong(check_memory_budget, _peak, largest)
    assert "✗ 1/3 checks passed" in text and "a budget of 5,000 bytes per rank: you say m=4" in text
    assert "within the budget means ≤" in text


def test_05_a_byte_of_slack_in_the_budget():
    """m·bytes − 1 ≤ budget: one too many only a byte short of m micro-batches. Planted:
    BUDGET_LIMITS without its budgets one byte short."""

    def largest(kind, p, budget, per_mb):
        if kind != "gpipe":
            return _largest(kind, p, budget, per_mb)
        return max((m for m in range(1, 65) if m * per_mb - 1 <= budget), default=0)

    text = wrong(check_memory_budget, _peak, largest)
    assert "✗ 1/3 checks passed" in text and "One too many: GPipe's ranks hold all m" in text


@pytest.mark.parametrize(("answer", "said"), [("4096", "str '4096'"), (None, "NoneType None"), (True, "bool True")])
def test_05_a_peak_that_is_not_a_number(answer, said):
    """Only a number is a byte count: a string, None and a bool (an int to Python) are named, with the call."""
    text = wrong(check_memory_budget, lambda *a: answer, _largest)
    assert re.search(rf"peak_bytes\('gpipe', \d+, \d+, \d+, \d+\) returned {re.escape(said)}; return a number", text)


# -- 06 the baton ---------------------------------------------------------------------------------------
def _stage_step(pop=True, send_scaled=True, sent=lambda out, m: out, grown=1.0):
    def stage_step(stage, baton):
        if baton.op == "F":
            x = baton.inputs if stage.is_first else baton.receive().requires_grad_()
            out = stage.module(x)
            if stage.is_last:
                loss = stage.loss_fn(out, baton.target)
                out = loss / stage.m
                stage.saved[baton.mb] = (x, out)
                baton.send(sent(out, stage.m) if send_scaled else loss)
                return
            stage.saved[baton.mb] = (x, out)
            baton.send(out)
        else:
            x, out = stage.saved.pop(baton.mb) if pop else stage.saved[baton.mb]
            (grown * out if stage.is_last else out).backward(None if stage.is_last else baton.receive())
            if not stage.is_first:
                baton.send(x.grad)

    return stage_step


def test_06_what_the_forward_kept_is_never_taken_out():
    """The gradients right, stage.saved still full at the end. Planted: the leftover check in
    _in_one_process left out."""
    text = wrong(check_stage_step, _stage_step(pop=False))
    assert "✗ 0/3 checks passed" in text and "still keeps micro-batches [0, 1, 2, 3] in stage.saved" in text


def test_06_the_loss_sent_unscaled():
    """The backward from the scaled loss (the gradients right), the loss reported unscaled.
    Planted: the loss comparison in _in_one_process left out."""
    text = wrong(check_stage_step, _stage_step(send_scaled=False))
    assert "✗ 0/3 checks passed" in text and "That is m times the mean" in text


def test_06_the_loss_scaled_twice_is_not_told_it_is_m_times_the_mean():
    """Each micro-batch's loss divided by m once more: wrong, but not by the factor the hint names.
    Planted: the hint given whatever the loss."""
    text = wrong(check_stage_step, _stage_step(sent=lambda out, m: out / m))
    assert "the whole batch's mean loss is" in text and "m times the mean" not in text


def test_06_gradients_wrong_on_every_stage_by_no_factor_the_hints_name():
    """The last stage's backward from twice its loss: every stage's gradients twice the whole model's,
    which is neither m times (a loss left undivided) nor stage 0's alone (a gradient not passed back)."""
    text = wrong(check_stage_step, _stage_step(grown=2.0))
    assert "the gradients of stages 0, 1 differ from the whole model's" in text, text
    assert "m = " not in text and "stage 0's are not" not in text


# -- 08 balance: the cuts ----------------------------------------------------------------------------------
def test_08_the_checkers_dynamic_programme_finds_what_trying_every_cut_finds():
    rng = random.Random(8)
    for _ in range(400):
        n = rng.randint(1, 11)
        costs, p = balance._costs(rng, n), rng.randint(1, n)
        best, cut = balance.lightest(costs, p)
        assert balance.ties(best, balance.every_cut(costs, p)[0]) and balance.ties(balance.every_cut(costs, p)[0], best)
        assert max(balance.stage_costs(costs, cut)) == best and len(cut) == p + 1


def test_08_long_cases_have_more_cuts_than_brute_force_can_try():
    for costs, p in balance.long_cases(20, seed=1):
        assert 60 <= len(costs) <= 80 and 10 <= p <= 16
        assert math.comb(len(costs) - 1, p - 1) > 10**10


def _every_cut(costs, p):
    return balance.every_cut(costs, p)[1]


def _params(layers, sample):
    return [sum(t.numel() for t in layer.parameters()) for layer in layers]


def test_08_trying_every_cut_does_not_finish_on_a_long_model():
    """Exact on the short cases; stopped on the first long one. Planted: LONG_LAYERS = (20, 24),
    LONG_STAGES = (4, 6): few enough cuts for brute force to finish."""
    text = wrong(check_balance, _every_cut, _params)
    assert "✗ 2/5 checks passed" in text and "did not finish within" in text and "Trying every cut means C(" in text
    assert "dynamic programming, p·n² steps" in text


def _brute_force(costs, p):
    """Every cut tried, written as a learner would (sent by value into the sandbox)."""
    import itertools

    best = None
    for inner in itertools.combinations(range(1, len(costs)), p - 1):
        bounds = (0, *inner, len(costs))
        slowest = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
        if best is None or slowest < best[0]:
            best = (slowest, bounds)
    return best[1]


@pytest.mark.distributed
def test_08_trying_every_cut_is_stopped_in_time_under_the_watch():
    """In a watched sandbox, as graded (~15 s): the deadline interrupts the learner's code, never
    the watch's profile function (an exception out of it switches the profiler off, which the watch
    would refuse as the learner's). Planted: _deadline's ring raising wherever the signal lands (the
    verdict then says the code "switches the checker's watch off")."""
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check_balance, _brute_force, _params, timeout=120)
    text = " ".join(str(info.value).split())
    assert "✗ 2/5 checks passed" in text and "did not finish within" in text and "Trying every cut means C(" in text


# -- 08 balance: the layer costs, on the checker's clock ------------------------------------------------------
def _layers(name):
    task = make_task("gpt", batch_size=64, **layer_clock.GPTS[name])
    return task.layers()


LESSON, WIDE_VOCAB, WIDE_BLOCKS = layer_clock.GPTS  # their labels


def _weighed(name, costs, times, after=None):
    return layer_clock.Weighed(name, _layers(name), costs, times, after or times)


HONEST = {LESSON: [0.1, 1.0, 1.1, 0.9, 3.0], WIDE_VOCAB: [0.1, 1.0, 1.0, 12.0], WIDE_BLOCKS: [0.05, 8.0, 8.5, 0.6]}
TIMES = {
    LESSON: [0.3e-3, 1.6e-3, 1.6e-3, 1.5e-3, 4e-3],
    WIDE_VOCAB: [0.4e-3, 1.5e-3, 1.4e-3, 16e-3],
    WIDE_BLOCKS: [0.3e-3, 8e-3, 8e-3, 0.7e-3],
}


def _judge(costs=None, times=None) -> str:
    costs, times = {**HONEST, **(costs or {})}, {**TIMES, **(times or {})}
    return layer_clock.judge([_weighed(name, costs[name], times[name]) for name in layer_clock.GPTS])


def test_08_honest_costs_pass_the_clock():
    assert "pairs of kinds of layer timed at least 3× apart here" in _judge()


def test_08_the_verdict_counts_the_pairs_judged_in_every_gpt():
    gpts = [_weighed(name, HONEST[name], TIMES[name]) for name in layer_clock.GPTS]
    pairs = [len(layer_clock.apart(g.layers, layer_clock.PAIRS[g.label], g.before, g.after)) for g in gpts]
    assert sum(pairs) > max(pairs) > 0  # pairs judged in more than one GPT
    assert f"{len(gpts)} GPTs, {sum(pairs)} pairs of kinds of layer" in layer_clock.judge(gpts)


def test_08_the_head_called_the_heaviest_of_every_gpt():
    """The guess that passed before: embedding cheapest, head heaviest. Planted: RATIO 3 made 30."""
    with pytest.raises(Mistake, match="put the head \\(layer 3\\) at 3, as heavy as the blocks"):
        _judge({WIDE_BLOCKS: [0.1, 1.0, 1.0, 3.0]})


def test_08_the_head_called_the_cheapest():
    """Planted: RATIO 3 made 30 (the head is 11× a block in the wide vocabulary's GPT)."""
    with pytest.raises(Mistake, match="The head's work grows with the vocabulary"):
        _judge({WIDE_VOCAB: [0.1, 1.0, 1.0, 0.5]})


def test_08_the_same_numbers_for_two_gpts_are_not_measured():
    with pytest.raises(Mistake, match="They are the numbers you gave for a GPT with a vocabulary of 8192"):
        _judge({WIDE_VOCAB: [0.1, 1.0, 1.0, 12.0], WIDE_BLOCKS: [0.1, 1.0, 1.0, 12.0]})


@pytest.mark.parametrize("ratio, judged", [(3.0, True), (2.99, False)])
def test_08_a_pair_is_judged_from_exactly_the_clocks_ratio(ratio, judged):
    """The head ratio × a block in the clock, the learner's costs calling it lighter: refused at
    RATIO, not below. Planted: apart()'s `>=` made `>`."""
    times = {WIDE_VOCAB: [0.4e-3, 1e-3, 1e-3, ratio * 1e-3]}
    costs = {WIDE_VOCAB: [0.1, 1.0, 1.0, 0.5]}
    if judged:
        with pytest.raises(Mistake, match="3 times as long"):
            _judge(costs, times)
    else:
        _judge(costs, times)


def test_08_a_pair_only_one_of_the_clocks_two_timings_tells_apart_is_not_judged():
    """A burst of load during one timing is not held against the learner. Planted: apart() over
    the first measurement alone."""
    gpt = layer_clock.Weighed(
        WIDE_VOCAB, _layers(WIDE_VOCAB), [0.1, 1.0, 1.0, 0.5], [0.4e-3, 1e-3, 1e-3, 16e-3], [0.4e-3, 1e-3, 1e-3, 2e-3]
    )
    assert layer_clock.apart(gpt.layers, [("Readout", "Block")], gpt.before, gpt.after) == []
    layer_clock.judge([_weighed(LESSON, HONEST[LESSON], TIMES[LESSON]), gpt])


def test_08_lesson_06s_head_and_blocks_are_not_judged_however_far_apart_the_clock_finds_them():
    """Their work is 3× apart; under load the clock found the head 16× the blocks (the longest layer
    is cut by the scheduler in nearly every run) while an honest median of 5 put them level (a
    false refusal seen on this machine, kept here as it was). Planted: ("Readout", "Block") added
    to PAIRS["lesson 06's GPT"]."""
    _judge({LESSON: [0.00011, 0.0306, 0.0242, 0.0147, 0.023]}, {LESSON: [0.31e-3, 1.9e-3, 1.89e-3, 1.45e-3, 22.74e-3]})


def test_08_the_learners_blocks_count_by_their_median():
    """One of three blocks the learner timed oddly low does not set the blocks below the embedding.
    Planted: a kind's cost the smallest of its layers' (median made min in judge())."""
    _judge({LESSON: [0.1, 0.05, 1.0, 1.1, 3.0]})


def test_08_the_clock_orders_the_course_gpts_as_their_work_does():
    """The checker's own measurement, here and now: the pairs a guess gets wrong are found apart."""
    torch.set_num_threads(1)
    for name, (heavy, light) in {
        WIDE_VOCAB: ("Readout", "Block"),
        WIDE_BLOCKS: ("Block", "Readout"),
        LESSON: ("Block", "Embedding"),
    }.items():
        task = make_task("gpt", batch_size=64, **layer_clock.GPTS[name])
        layers, sample = task.layers(), task.batch(0)[0][:8]
        for _attempt in range(3):  # a machine too busy just now leaves pairs unjudged: try again
            times = [layer_clock.measure(layers, sample) for _ in range(2)]
            if (heavy, light) in [pair[:2] for pair in layer_clock.apart(layers, layer_clock.PAIRS[name], *times)]:
                break
        else:
            raise AssertionError(f"{name}: the clock did not find {heavy} {layer_clock.RATIO:g}× {light}: {times}")


def test_08_the_clock_keeps_each_layers_fastest_round_after_one_warm_up(monkeypatch):
    """Three layers, two rounds: each is run three times, the first a warm-up left out however fast."""
    took = iter([0.1, 0.2, 0.3, 5.0, 4.0, 7.0, 6.0, 9.0, 2.0])  # round by round, layer by layer
    ran = []
    monkeypatch.setattr(layer_clock, "_once", lambda layer, x: ran.append(layer) or next(took))
    layers = [torch.nn.Linear(2, 2) for _ in range(3)]
    assert layer_clock.measure(layers, torch.ones(1, 2), rounds=2) == [5.0, 4.0, 2.0]
    assert ran == layers * 3


def test_08_hard_coded_layer_costs_are_refused():
    """A list typed in for the lesson's GPT: the other GPTs have other numbers of layers."""
    text = wrong(
        check_balance, lambda costs, p: balance.lightest(costs, p)[1], lambda layers, sample: [0.1, 1.0, 1.0, 1.0, 3.0]
    )
    assert "✗ 3/5 checks passed" in text and "layer_costs returned 5 numbers for 4 layers" in text


@pytest.mark.distributed
@pytest.mark.checker_run
@pytest.mark.timeout(300)
def test_06_the_real_run_runs_the_learners_stage_step(monkeypatch):
    """A stage_step right in this process and failing on the workers: the run on 2 processes is the
    learner's, not the engine's own stage step. Planted: _config's stage_step left out."""
    import os

    monkeypatch.setattr(judged, "SAID", None)  # the verdict holds the workers' traceback: no snapshot of it

    here, right = os.getpid(), _stage_step()

    def only_here(stage, baton):
        if os.getpid() != here:
            raise RuntimeError("not on a worker")
        return right(stage, baton)

    text = wrong(check_stage_step, only_here)
    assert "✗ 2/3 checks passed" in text and "not on a worker" in text, text
