"""The exercises about the other parallelisms (11 tensor parallelism's f and g, 12 the bucketed
all-reduce, 13 the layout): typical wrong answers are refused with the message that names the
mistake (judged directly: the checkers' logic), and the engine's own answer (and torch's DDP), in
several disguises, with the message that names it (in a watched sandbox, as when graded). Every wrong
answer here is refused before any worker process starts."""

import dataclasses
import importlib
import re

import pytest
import torch

from minipipe.course.exercises import WrongAnswer, check_data_parallel, check_layout, check_tensor_parallel
from minipipe.course.exercises.layout import CHOICES, NAMED
from minipipe.planner import Layout, make_setup, plan
from tests.support.answers import Copy, Reduce, _buckets, _reduce
from tests.support.judged import direct, sandboxed


def wrong(check, *answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


def refused(check, *answer) -> str:
    """The verdict on an answer that asks the engine, in a watched sandbox (as when graded)."""
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check, *answer)
    return " ".join(str(info.value).split())


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ReduceBoth(Reduce):
    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        torch.distributed.all_reduce(grad)
        return grad, None


class OneGradient(Copy):
    @staticmethod
    def backward(ctx, grad):
        return grad


def test_11_g_without_its_all_reduce_leaves_partial_products():
    assert "g's forward must sum them" in wrong(check_tensor_parallel, Copy, Identity)


def test_11_f_without_its_all_reduce_leaves_a_share_of_the_input_gradient():
    assert "f's backward must sum the shares" in wrong(check_tensor_parallel, Identity, Reduce)


def test_11_g_reducing_in_backward_too_counts_the_gradient_tp_times():
    assert "tp = 2 times too large" in wrong(check_tensor_parallel, Copy, ReduceBoth)


def test_11_f_and_g_swapped():
    assert "g's forward must sum them" in wrong(check_tensor_parallel, Reduce, Copy)


def test_11_a_backward_must_return_a_gradient_per_input():
    assert "return (grad, None)" in wrong(check_tensor_parallel, OneGradient, Reduce)


class NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.view_as(x)


def _plain(x, group):
    return x


@pytest.mark.parametrize(
    ("f", "g", "said"),
    [
        (_plain, Reduce, "f (Copy) is function"),
        (Copy, _plain, "g (Reduce) is function"),
        (Copy, "Reduce", "g (Reduce) is str 'Reduce'"),
        (Copy, NoBackward, "g (Reduce)"),
    ],
    ids=["f a function", "g a function", "g a string", "g without a backward"],
)
def test_11_f_and_g_that_are_not_autograd_functions_are_named(f, g, said):
    text = wrong(check_tensor_parallel, f, g)
    assert said in text and ("torch.autograd.Function" in text or "backward" in text)


def _engine_tp():
    from minipipe.parallel.tensor import CopyToTP, ReduceFromTP

    return CopyToTP, ReduceFromTP


class EngineInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        tensor = importlib.import_module("minipipe.parallel.tensor")
        return tensor.CopyToTP.forward(ctx, x, tensor.TPGroup(None, 0, 2))

    @staticmethod
    def backward(ctx, grad):
        return grad, None


@pytest.mark.distributed
@pytest.mark.parametrize(
    "answer",
    [_engine_tp, lambda: (type("Mine", (_engine_tp()[0],), {}), Reduce)],
    ids=["the engine's classes", "a subclass"],
)
def test_11_the_engines_f_and_g_are_refused(answer):
    assert "the engine's own f (CopyToTP)" in refused(check_tensor_parallel, *answer())


@pytest.mark.distributed
def test_11_the_engines_group_inside_is_refused():
    assert "the engine's own tensor-parallel group" in refused(check_tensor_parallel, EngineInside, Reduce)


def test_12_buckets_in_the_forward_order():
    forward = lambda params, limit: [list(reversed(b)) for b in reversed(_buckets(params, limit))]  # noqa: E731
    assert "Backward computes the last layers' gradients first" in wrong(check_data_parallel, forward, _reduce())


def test_12_buckets_counted_in_values_not_bytes():
    def by_values(params, limit):
        out, size = [], 0
        for i in reversed(range(len(params))):
            if out and size + params[i].numel() <= limit:
                out[-1].append(i)
                size += params[i].numel()
            else:
                out.append([i])
                size = params[i].numel()
        return out

    assert "That counts values, not bytes" in wrong(check_data_parallel, by_values, _reduce(buckets=by_values))


def test_12_an_answer_of_the_wrong_shape_is_named_by_the_call_it_answered():
    import re

    text = wrong(check_data_parallel, lambda params, limit: {"bucket": list(range(len(params)))}, _reduce())
    call = re.search(r"buckets\(<(\d+) parameters of ([\d, ]+) values>, (\d+)\) returned \{'bucket'", text)
    assert call and int(call[1]) == len(call[2].split(", ")) > 1, text
    assert "return a list of buckets, each a list of indices into params" in text


def test_12_a_bucket_closed_too_early():
    one_each = lambda params, limit: [[i] for i in reversed(range(len(params)))]  # noqa: E731
    assert "would still fit" in wrong(check_data_parallel, one_each, _reduce(buckets=one_each))


def test_12_summed_not_averaged():
    assert "all_reduce sums; divide by the number of replicas" in wrong(
        check_data_parallel, _buckets, _reduce(mean=False)
    )


def test_12_gradients_left_as_each_replica_computed_them():
    """Each replica's gradients are its own shard's, so one that reduces nothing differs from the whole batch's."""
    text = wrong(check_data_parallel, _buckets, lambda params, limit, group=None: None)
    assert (
        "✗ 1/4 checks passed" in text and "rank 0's gradient of parameter 0 is not the mean over the replicas" in text
    )


def test_12_one_all_reduce_per_parameter():
    assert "one all-reduce per parameter" in wrong(check_data_parallel, _buckets, _reduce(per_bucket=False))


def test_12_one_all_reduce_of_everything():
    everything = lambda params, limit: [list(reversed(range(len(params))))]  # noqa: E731
    text = wrong(check_data_parallel, _buckets, _reduce(buckets=everything))
    assert "That is one all-reduce of everything: send one per bucket, so the first can start early." in text


@pytest.mark.parametrize(
    "buckets",
    [lambda n: [list(range(n - 1, 0, -1))], lambda n: [[n - 1, n - 1], list(range(n - 2, -1, -1))]],
    ids=["parameter 0 left out", "the last parameter twice"],
)
def test_12_buckets_that_leave_out_or_repeat_a_parameter(buckets):
    answer = lambda params, limit: buckets(len(params))  # noqa: E731
    text = wrong(check_data_parallel, answer, _reduce())
    assert re.search(r"your buckets \[\[.*\]\] must hold every parameter's index \(0 to \d+\) exactly once", text), text


DP_DISGUISES = {
    "assign_buckets": (
        (
            lambda params, limit: importlib.import_module("minipipe.parallel.data").assign_buckets(params, limit),
            _reduce(),
        ),
        "the engine's own bucketing",
    ),
    "GradReducer": (
        (
            _buckets,
            lambda params, limit, group=None: (
                importlib.import_module("minipipe.parallel.data").GradReducer(params, group, 1).finish()
            ),
        ),
        "the engine's own gradient reducer",
    ),
    "torch's DDP": (
        (_buckets, lambda params, limit, group=None: torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))),
        "torch's own DistributedDataParallel",
    ),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", DP_DISGUISES)
def test_12_the_engines_bucketing_and_ddp_are_refused(disguise):
    fns, message = DP_DISGUISES[disguise]
    assert message in refused(check_data_parallel, *fns)


# -- 13 the layout ------------------------------------------------------------------------------
def _tensor_parallel(tp):
    """A mistake on the named clusters; on those drawn when the check runs, the planner's best (a
    direct check watches nothing), so that the verdict shows the named cluster's mistake."""

    def choose(model, gpus, gpu):
        if (model, gpus, gpu) not in NAMED:
            return plan(model, gpus, gpu, **CHOICES).rows[0].layout
        setup = make_setup(model, gpus, gpu)
        t = min(tp, setup.model.kv)  # tp must divide the key/value heads (8 in Llama 2 70B)
        pp = 1 if tp == 8 else 4
        dp = gpus // (t * pp)
        return Layout(tp=t, pp=pp, dp=dp, micro_batch=1, m=setup.batch // dp)

    return choose


def test_13_too_little_model_parallelism_does_not_fit():
    text = wrong(check_layout, _tensor_parallel(8))
    assert "gpt3-175b on 1024 × a100-80gb" in text and "it does not fit" in text and "16 bytes a parameter" in text


def test_13_tensor_parallelism_across_nodes_is_slow():
    text = wrong(check_layout, _tensor_parallel(16))
    assert "tp=16 spans nodes of 8 GPUs" in text and "longer (at most 10%)" in text


def test_13_full_recomputation_where_none_fits_is_slow_and_said_so():
    def choose(model, gpus, gpu):
        return dataclasses.replace(plan(model, gpus, gpu, **CHOICES).rows[0].layout, recompute="full")

    text = wrong(check_layout, choose)
    assert "llama2-7b on 64 × a100-80gb" in text and "33% longer (at most 10%)" in text
    assert text.endswith("- full recomputation repeats every forward; selective (or none) may fit already")


@pytest.mark.distributed
def test_13_asking_the_planner_is_refused():
    from minipipe.planner import plan

    def choose(model, gpus, gpu):
        return plan(model, gpus, gpu).rows[0].layout

    assert "the planner's search" in refused(check_layout, choose)


def test_11_a_differing_gradient_is_named_with_whether_it_is_the_ranks_slice():
    from minipipe.course.exercises.tensor_parallel import _what

    sliced = {"fc.weight", "fc.bias", "out.weight"}  # split over the ranks; x and out.bias are whole on each
    for name in (*sliced, "x", "out.bias"):
        assert _what(name) == f"gradient of {name}" + (" (its slice)" if name in sliced else "")
    assert _what("y") == "output"
