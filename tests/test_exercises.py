"""The exercises, both directions: the reference solutions pass (nbval runs exercises/solutions/,
see tests/notebooks.py), every untouched learner notebook is "not done yet", and typical wrong
answers are rejected with a message that names the mistake. The wrong answers are defined here;
each is rejected before any worker process starts."""
import importlib.util

import pytest

from minipipe import RunConfig, run
from minipipe.cli import main
from minipipe.course.exercises import (NotDoneYet, WrongAnswer, check_balance, check_bubble_arithmetic,
                                check_deadlock_fixed, check_gpipe, check_layout, check_loss_scaling,
                                check_memory_budget, check_one_f_one_b, check_stage_step)
from minipipe.course.exercises.deadlock import BROKEN
from minipipe.course.exercises.notebook import run_notebook
from minipipe.engine.launch import WorkerError
from minipipe.schedule.ops import B, F
from minipipe.engine.partition import profile_layers, split_evenly
from minipipe.planner import Layout, make_setup

from notebooks import REPO, find, ids

LEARNER = find(["exercises/[0-9][0-9]_*.ipynb"])


def _build_module():
    spec = importlib.util.spec_from_file_location("exercises_build", REPO / "exercises" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrong(check, *answer) -> str:
    """The verdict on a wrong answer, its lines unwrapped."""
    with pytest.raises(WrongAnswer) as info:
        check(*answer)
    return " ".join(str(info.value).split())


# -- the notebooks ------------------------------------------------------------------------------
def test_notebooks_are_built_from_their_sources():
    build = _build_module()
    assert build.drift() == [], "run `python exercises/build.py` and commit the notebooks"
    stems = {p.stem for p in (REPO / "exercises" / "source").glob("[0-9][0-9]_*.py")}
    assert {p.stem for p in LEARNER} == stems and len(stems) >= 9
    assert {p.stem for p in find(["exercises/solutions/*.ipynb"])} == stems


def test_learner_notebooks_hold_no_solution():
    build = _build_module()
    for src in (REPO / "exercises" / "source").glob("[0-9][0-9]_*.py"):
        nb = build.learner_notebook(build.read_source(src))
        text = "\n".join(cell.source for cell in nb.cells)
        assert "BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text, src.name
        assert any("check" in cell.metadata.get("tags", []) for cell in nb.cells), f"{src.name} has no check cell"
        assert "../lessons/" in nb.cells[0].source, f"{src.name} does not link the lesson it practises"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", LEARNER, ids=ids(LEARNER))
def test_untouched_learner_notebook_is_not_done_yet(path):
    result = run_notebook(path)
    crashes = [c for c in result.cells if not c.check and c.status != "passed"]
    assert not crashes, f"cells outside the checks fail: {crashes}"
    assert result.checks and all(c.status == "not done yet" for c in result.checks), result.report()
    assert result.status == "not done yet"


def test_minipipe_check_prints_verdicts_and_exits_0_only_when_all_pass(capsys):
    solved = "exercises/solutions/01_bubble_arithmetic.ipynb"
    assert main(["check", str(REPO / solved)]) == 0
    assert "✓ 5/5 checks passed" in capsys.readouterr().out
    assert main(["check", str(REPO / solved), str(REPO / "exercises/01_bubble_arithmetic.ipynb")]) == 1
    out = capsys.readouterr().out
    assert "not done yet: makespan" in out and "2 notebooks: 1 passed, 1 not done yet" in out
    assert main(["check", str(REPO / "exercises/no_such.ipynb")]) == 2
    assert "no such notebook or folder" in capsys.readouterr().err


# -- 01 bubble arithmetic -----------------------------------------------------------------------
def _makespan(kind, p, m, v, f, b):
    return (m + (p - 1) / v) * (f + b)


def _bubble(kind, p, m, v, f, b):
    return 1 - m * (f + b) / _makespan(kind, p, m, v, f, b)


def _messages(kind, p, m, v):
    return 0 if p == 1 else 2 * m * (p * v - 1)


def test_01_stub_is_not_done_yet():
    def makespan(kind, p, m, v, f, b):
        raise NotImplementedError()
    with pytest.raises(NotDoneYet, match="makespan"):
        check_bubble_arithmetic(makespan, _bubble, _messages)


def test_01_interleaving_without_the_1_over_v():
    text = wrong(check_bubble_arithmetic, lambda kind, p, m, v, f, b: (m + p - 1) * (f + b), _bubble, _messages)
    assert "makespan of interleaved" in text and "each chunk costs f/v" in text


def test_01_bubble_over_ideal_instead_of_over_total():
    text = wrong(check_bubble_arithmetic, _makespan, lambda kind, p, m, v, f, b: (p - 1) / (m * v), _messages)
    assert "idle time over the ideal" in text


def test_01_messages_forgetting_the_chunks():
    text = wrong(check_bubble_arithmetic, _makespan, _bubble, lambda kind, p, m, v: 2 * m * (p - 1))
    assert "p·v − 1" in text


def test_01_asking_the_engine_is_refused():
    from minipipe import theory

    def makespan(kind, p, m, v, f, b):
        return theory.makespan(kind, p, m, v, f, b)
    assert "asks minipipe" in wrong(check_bubble_arithmetic, makespan, _bubble, _messages)


# -- 02 GPipe and 03 1F1B --------------------------------------------------------------------------
def test_02_naive_order_is_named():
    def gpipe(p, m):
        return [[a for mb in range(m) for a in (F(r, mb), B(r, mb))] for r in range(p)]
    assert "That is naive model parallelism" in wrong(check_gpipe, gpipe)


def test_02_missing_micro_batch_shows_the_validator():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m - 1)] + [B(r, mb) for mb in range(m)] for r in range(p)]
    text = wrong(check_gpipe, gpipe)
    assert "validator rejects it" in text and "is missing" in text and "rank 0" in text


def test_02_backwards_on_the_wrong_rank():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m)] + [B(p - 1 - r, mb) for mb in range(m)] for r in range(p)]
    assert "lives on rank" in wrong(check_gpipe, gpipe)


def _one_f_one_b(extra_warmup=0, clamp=True):
    def one_f_one_b(p, m):
        lists = []
        for r in range(p):
            warmup = max(0, p - r - 1 + extra_warmup)
            warmup = min(warmup, m) if clamp else warmup
            acts = [F(r, mb) for mb in range(warmup)]
            for i in range(m - warmup):
                acts += [F(r, warmup + i), B(r, i)]
            acts += [B(r, mb) for mb in range(max(0, m - warmup), m)]
            lists.append(acts)
        return lists
    return one_f_one_b


def test_03_warm_up_one_too_long():
    text = wrong(check_one_f_one_b, _one_f_one_b(+1))
    assert "off-by-one warm-up" in text and "min(p − r, m)" in text


def test_03_warm_up_one_too_short():
    assert "its warm-up is too short" in wrong(check_one_f_one_b, _one_f_one_b(-1))


def test_03_forgetting_m_smaller_than_p():
    text = wrong(check_one_f_one_b, _one_f_one_b(clamp=False))
    assert "outside the schedule" in text and "m=1" in text


def test_03_gpipe_is_not_1f1b():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)]
    assert "that is GPipe's order" in wrong(check_one_f_one_b, gpipe)


# -- 04 the deadlock ----------------------------------------------------------------------------
def test_04_unchanged_schedule_shows_the_marked_grid():
    def fixed():
        return BROKEN
    text = wrong(check_deadlock_fixed, fixed)
    assert "no process was started" in text and "deadlock: rank 0 waits for 1B0" in text and ">0B0<" in text


def test_04_removing_actions_is_not_a_fix():
    def fixed():
        return BROKEN.replace(" 0B0", "").replace(" 1B0", "")
    assert "rank 0: you removed 0B0" in wrong(check_deadlock_fixed, fixed)


def test_04_a_fix_that_serialises_the_ranks_is_too_slow():
    def fixed():
        return "\n".join(f"rank {r}: " + " ".join(f"{r}{op}{mb}" for mb in range(4) for op in "FB") for r in range(3))
    assert "it runs, but takes 36 time units" in wrong(check_deadlock_fixed, fixed)


# -- 05 the loss --------------------------------------------------------------------------------
def _accumulate(scale):
    def accumulate(model, loss_fn, x, y, m):
        total = 0.0
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            loss = scale(loss_fn(model(xs), ys), m, xs)
            loss.backward()
            total += loss.item()
        return total
    return accumulate


def test_05_loss_not_divided_by_m():
    text = wrong(check_loss_scaling, _accumulate(lambda loss, m, xs: loss))
    assert "m = 2 times too large" in text and "Divide each micro-batch's loss by m" in text


def test_05_divided_by_the_rows_instead():
    assert "one over the micro-batch's rows" in wrong(check_loss_scaling, _accumulate(lambda loss, m, xs: loss / len(xs)))


def test_05_gradients_zeroed_inside_the_loop():
    def accumulate(model, loss_fn, x, y, m):
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            model.zero_grad()
            (loss_fn(model(xs), ys) / m).backward()
        return 0.0
    assert "the last micro-batch's alone" in wrong(check_loss_scaling, accumulate)


# -- 06 balance -------------------------------------------------------------------------------
def _by_count(costs, p):
    return split_evenly([1.0] * len(costs), p)


def _profile(layers, sample):
    return profile_layers(layers, sample)


def test_06_cut_by_layer_count():
    assert "as if every layer cost the same" in wrong(check_balance, _by_count, _profile)


def test_06_balanced_in_parameters_not_in_time():
    def layer_costs(layers, sample):
        return [sum(t.numel() for t in layer.parameters()) for layer in layers]
    text = wrong(check_balance, split_evenly, layer_costs)
    assert "parameter counts" in text and "a cut balanced in parameters is not balanced in time" in text


def test_06_stages_without_layers():
    def balance(costs, p):
        return [0] * p + [len(costs)]
    assert "every stage gets at least one layer" in wrong(check_balance, balance, _profile)


# -- 07 memory ----------------------------------------------------------------------------------
def _largest_m(kind, p, budget, per_mb):
    if kind == "gpipe":
        return min(64, budget // per_mb)
    return 64 if p * per_mb <= budget else budget // per_mb


def test_07_1f1b_holding_p_on_every_rank():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else min(p, m)) * per_mb
    assert "it holds at most p − r" in wrong(check_memory_budget, peak_bytes, _largest_m)


def test_07_1f1b_forgetting_m_smaller_than_p():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else p - rank) * per_mb
    assert "only m micro-batches to hold" in wrong(check_memory_budget, peak_bytes, _largest_m)


def test_07_1f1b_budget_as_if_gpipe():
    def peak_bytes(kind, p, m, rank, per_mb):
        return (m if kind == "gpipe" else min(p - rank, m)) * per_mb
    text = wrong(check_memory_budget, peak_bytes, lambda kind, p, budget, per_mb: min(64, budget // per_mb))
    assert "however large m is" in text


# -- 08 the baton -------------------------------------------------------------------------------
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
            g = None if stage.is_last else baton.receive()
            out.backward(g)
            if not stage.is_first:
                baton.send(x.grad if send_grad else x.detach())   # the activation, not its gradient
    return stage_step


def test_08_stub_is_not_done_yet():
    def stage_step(stage, baton):
        raise NotImplementedError()
    with pytest.raises(NotDoneYet):
        check_stage_step(stage_step)


def test_08_loss_not_scaled():
    assert "m = 4 times the whole model's" in wrong(check_stage_step, _stage_step(scale=False))


def test_08_received_input_not_a_leaf():
    text = wrong(check_stage_step, _stage_step(leaf=False))
    assert "send() takes a tensor" in text and "x.requires_grad_()" in text


def test_08_wrong_gradient_sent_back():
    assert "not the gradient of stage 1's input" in wrong(check_stage_step, _stage_step(send_grad=False))


def test_08_hook_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="splits backward into I and W"):
        run(RunConfig(schedule="zb-h1", stage_step=_stage_step()))
    with pytest.raises(ValueError, match="stage_step must be a function"):
        run(RunConfig(stage_step="mine"))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_08_a_hook_that_never_sends_stops_the_run_naming_the_action():
    def stage_step(stage, baton):
        if baton.op == "F":
            x = baton.inputs if stage.is_first else baton.receive()
            stage.saved[baton.mb] = (x, stage.module(x))
        else:
            stage.saved.pop(baton.mb)
    with pytest.raises(WorkerError, match=r"0F0: the hook never called baton.send\(\)"):
        run(RunConfig(p=2, m=2, batch_size=8, steps=1, timeout=20.0, stage_step=stage_step))



# -- 09 the layout ------------------------------------------------------------------------------
def _tensor_parallel(tp):
    def choose(model, gpus, gpu):
        setup = make_setup(model, gpus, gpu)
        t = min(tp, setup.model.kv)                     # tp must divide the key/value heads (8 in Llama 2 70B)
        pp = 1 if tp == 8 else 4
        dp = gpus // (t * pp)
        return Layout(tp=t, pp=pp, dp=dp, micro_batch=1, m=setup.batch // dp)
    return choose


def test_09_too_little_model_parallelism_does_not_fit():
    text = wrong(check_layout, _tensor_parallel(8))
    assert "gpt3-175b on 1024 × a100-80gb" in text and "it does not fit" in text and "16 bytes a parameter" in text


def test_09_tensor_parallelism_across_nodes_is_slow():
    text = wrong(check_layout, _tensor_parallel(16))
    assert "tp=16 spans nodes of 8 GPUs" in text and "longer (at most 10%)" in text


def test_09_asking_the_planner_is_refused():
    from minipipe.planner import plan

    def choose(model, gpus, gpu):
        return plan(model, gpus, gpu).rows[0].layout
    assert "asks the planner's search" in wrong(check_layout, choose)
