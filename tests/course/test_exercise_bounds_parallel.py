"""The near misses of the exercises on the other parallelisms (11 tensor parallelism's f and g, 12
the bucketed all-reduce, 13 the layout, 15 FSDP's bytes and ZeRO's memory): for each bound or
condition of a checker, an answer wrong by the least that bound exists for, refused by that very
check with the message that names the mistake. Each docstring names the loosening of the checker
it was seen to go red on (planted, then restored). No process starts: all are refused before a
real run."""

import math
import random

import pytest
import torch
import torch.distributed as dist

from minipipe.course.exercises import (
    WrongAnswer,
    check_data_parallel,
    check_layout,
    check_sharded,
    check_tensor_parallel,
    data_parallel,
    tensor_parallel,
)
from minipipe.course.exercises.layout import CHOICES
from minipipe.planner import Layout, plan
from tests.support.answers import Copy, Reduce, _buckets, _reduce, fsdp_bytes, zero_memory
from tests.support.judged import DirectClient, direct


def _learners(*answers) -> list:
    """The answers as a checker holds them (judged directly, as `direct` does), for one of its parts."""
    from minipipe.course.grading.judge import Learner

    client = DirectClient(answers)
    return [Learner(client, f"#{i}", answer.__name__) for i, answer in enumerate(answers)]


def wrong(check, *answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


# -- 11 tensor parallelism --------------------------------------------------------------------------
class ReduceInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)  # the partial product it was given, summed in place
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class CopyInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad, group=ctx.group)  # the buffer autograd handed in, summed in place
        return grad, None


class CopyScalingInput(Copy):
    """f whose forward scales its input by one, in place: the same numbers, the caller's x changed."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.mul_(1.0).view_as(x)


class ReduceScalingGrad(Reduce):
    """g whose backward scales the gradient it is handed by one, in place: the same numbers."""

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(1.0), None


class ReduceAveragedBack(Reduce):
    """g whose backward all-reduces too, and divides back: the same numbers, one all-reduce more."""

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / dist.get_world_size(), None


class CopyAveragedForward(Copy):
    """f whose forward all-reduces its input and divides back: the same numbers, one more."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x / dist.get_world_size(group)


def test_11_g_all_reducing_its_input_in_place():
    """The output and every gradient right. Planted: run_rank without keep("g's input", ...)."""
    text = wrong(check_tensor_parallel, Copy, ReduceInPlace)
    assert "✗ 3/6 checks passed" in text and "g's forward all-reduced its input in place" in text
    assert "All-reduce a copy: x = x.clone()" in text


def test_11_f_all_reducing_the_gradient_it_is_handed_in_place():
    """Planted: run_rank without keep_grad("the gradient handed to f's backward", ...)."""
    text = wrong(check_tensor_parallel, CopyInPlace, Reduce)
    assert "✗ 3/6 checks passed" in text and "f's backward all-reduced the gradient it was handed, in place" in text


@pytest.mark.parametrize(
    ("f", "g", "said"),
    [
        (CopyScalingInput, Reduce, "f's forward changed its input x in place. The caller still holds x"),
        (
            Copy,
            ReduceScalingGrad,
            "g's backward changed the gradient it was handed, in place. That buffer is autograd's",
        ),
    ],
    ids=["f-input", "g-gradient"],
)
def test_11_f_or_g_changing_a_tensor_in_place_with_the_same_numbers(f, g, said):
    """Planted: run_rank without keep("f's input", ...), and without keep_grad("the gradient handed to g's
    backward", ...)."""
    text = wrong(check_tensor_parallel, f, g)
    assert said in text


def test_11_g_with_two_backward_all_reduces():
    """Planted: _talk comparing the forward's count alone (`forward != 1`)."""
    text = wrong(check_tensor_parallel, Copy, ReduceAveragedBack)
    assert "✗ 4/6 checks passed" in text and "1 all-reduce(s) in the forward and 2 in the backward" in text
    assert "g's backward is the identity" in text


def test_11_f_with_an_all_reduce_in_the_forward():
    """Planted: _talk comparing the backward's count alone (`backward != 1`)."""
    text = wrong(check_tensor_parallel, CopyAveragedForward, Reduce)
    assert "✗ 4/6 checks passed" in text and "2 all-reduce(s) in the forward and 1 in the backward" in text
    assert "f's forward is the identity" in text


class CopyWantsAGroup(Copy):
    @staticmethod
    def forward(ctx, x, group):
        assert group is not None, "group should not be None"
        assert group.size() == dist.get_world_size(group)
        ctx.group = group
        return x.view_as(x)


def test_11_code_that_insists_on_a_group_gets_one():
    """The check used to pass group=None, which her own assert refused. Planted: run_rank called
    without group=world.group in _rank."""
    copy, reduce = _learners(CopyWantsAGroup, Reduce)
    assert "gradients" in tensor_parallel._backward(copy, reduce)
    assert "one each" not in tensor_parallel._talk(copy, reduce)


# -- 12 the bucketed all-reduce ------------------------------------------------------------------------
def test_12_torch_rule_is_what_torchs_reducer_computes():
    """The message names torch's rule: it is the one torch's C++ reducer follows, as DDP rebuilds its
    buckets after the first step (the gradients in the order they became ready, last first)."""
    for params, limit in data_parallel.param_lists(seed=12) + data_parallel.param_lists(seed=13):
        n = len(params)
        theirs, _ = dist._compute_bucket_assignment_by_size(
            list(reversed(params)), [limit], [False] * n, list(reversed(range(n)))
        )
        assert [list(b) for b in theirs] == data_parallel.torch_rule([data_parallel.nbytes(p) for p in params], limit)


def _torch_buckets(params, limit):
    return data_parallel.torch_rule([p.numel() * p.element_size() for p in params], limit)


def test_12_torchs_own_rule_lets_the_last_gradient_overflow():
    """Planted: judge_buckets' over-limit condition `len(b) > 1` made `len(b) > 2`."""
    text = wrong(check_data_parallel, _torch_buckets, _reduce(buckets=_torch_buckets))
    assert "✗ 0/4 checks passed" in text and "your bucket 0, [3, 2], holds 280 bytes, over the limit" in text
    assert "That is torch's own rule" in text and "counts values" not in text


def test_12_a_bucket_that_would_be_exactly_full_is_closed():
    """`size + n < bucket_bytes`: one gradient short of exactly the limit. Planted: judge_buckets'
    `size + next <= limit` made `<`."""

    def strict(params, limit):
        out, size = [], 0
        for i in reversed(range(len(params))):
            n = params[i].numel() * params[i].element_size()
            if out and size + n < limit:
                out[-1].append(i)
                size += n
            else:
                out.append([i])
                size = n
        return out

    text = wrong(check_data_parallel, strict, _reduce(buckets=strict))
    assert "✗ 0/4 checks passed" in text and "would still fit (exactly the limit: a bucket may hold that much)" in text


def test_12_averaged_over_two_replicas_whatever_their_number():
    """`flat /= 2`: right at dp = 2. Planted: _averaged over sizes (2,) only."""

    def halved(params, bucket_bytes, group=None):
        for bucket in _buckets(params, bucket_bytes):
            flat = torch.cat([params[i].grad.reshape(-1) for i in bucket])
            dist.all_reduce(flat, group=group)
            flat /= 2
            offset = 0
            for i in bucket:
                n = params[i].numel()
                params[i].grad.copy_(flat[offset : offset + n].view_as(params[i]))
                offset += n

    text = wrong(check_data_parallel, _buckets, halved)
    assert "✗ 1/4 checks passed" in text and "dp = 3 (ranks as threads)" in text


def test_12_the_buckets_sent_in_the_wrong_order():
    """The first bucket (the last layers') sent last. Planted: _one_per_bucket comparing the sorted
    sizes of the all-reduces."""
    text = wrong(check_data_parallel, _buckets, _reduce(buckets=lambda params, limit: _buckets(params, limit)[::-1]))
    assert "✗ 2/4 checks passed" in text and "in that order" in text


# -- 13 the layout -----------------------------------------------------------------------------------
LLAMA_70B = ("llama2-70b", 256, "h100-sxm")


def _but(layout):
    """The planner's best layout on every cluster the check asks about (those it draws too), but
    `layout` on Llama 2 70B (judged directly: the planner's search is within reach)."""
    return lambda model, gpus, gpu: (
        layout if (model, gpus, gpu) == LLAMA_70B else plan(model, gpus, gpu, **CHOICES).rows[0].layout
    )


def test_13_a_layout_13_percent_slower_than_the_best_is_refused():
    """tp=8 on Llama 2 70B: 13.4 % over the best. Planted: WITHIN 0.10 made 0.15."""
    text = wrong(check_layout, _but(Layout(tp=8, pp=4, dp=8, micro_batch=2, m=64, schedule="interleaved", v=5, zero=1)))
    assert "✗ 2/3 checks passed" in text and "llama2-70b on 256 × h100-sxm" in text and "longer (at most 10%)" in text


def test_13_a_layout_8_percent_slower_than_the_best_passes():
    """The other side of the bound: 7.7 % over the best. Planted: WITHIN 0.10 made 0.07."""
    said = direct(check_layout, _but(Layout(tp=4, pp=16, dp=4, micro_batch=2, m=128, schedule="1f1b", zero=1)))
    assert "✓ 3/3 checks passed" in said


# -- 15 FSDP's bytes, ZeRO's memory --------------------------------------------------------------------
def test_15_padding_every_first_dimension():
    """A shard too many where n divides the first dimension (the fixed 48 on 6 ranks, and drawn
    ones). Planted: the hint left out of _bytes_hint (the numbers alone are shown)."""
    text = wrong(
        check_sharded,
        lambda units, n: {k: v for k, v in zip(("all-gather", "reduce-scatter"), _padded_always(units, n))},
        zero_memory,
    )
    assert "✗ 0/3 checks passed" in text and "That pads every first dimension by a shard" in text


def _padded_always(units, n):
    gathered = sum((shape[0] // n + 1) * n * math.prod(shape[1:]) * 4 for unit in units for shape in unit)
    each = (n - 1) / n * gathered
    return 2 * each, each


def test_15_adam_without_its_step_counts_on_a_catalogue_model():
    """780 bytes of 80 GB. Planted: to_the_byte back to close() (a relative 1e-6), which let it
    pass on the catalogue's models."""
    text = wrong(check_sharded, fsdp_bytes, lambda *a: zero_memory(*a, steps=False))
    assert "✗ 1/3 checks passed" in text and "Llama 2 7B" in text and "n=8 ranks, ZeRO-0" in text
    assert "Adam's step counts are missing" in text and "780 bytes here" in text


def test_15_adams_step_counts_sharded_too():
    """Planted: the hint left out of _memory_hint."""

    def sharded_steps(parameters, tensors, block, n, zero):
        out = zero_memory(parameters, tensors, block, n, zero)
        return {**out, "optimizer": out["optimizer"] - 4 * tensors + 4 * tensors / (n if zero else 1)}

    text = wrong(check_sharded, fsdp_bytes, sharded_steps)
    assert "✗ 1/3 checks passed" in text and "ZeRO-1" in text and "That shards Adam's step counts too" in text


@pytest.mark.parametrize("rounding", [math.floor, math.ceil], ids=["down", "up"])
def test_15_shares_rounded_to_whole_bytes_pass_the_memory_check(rounding):
    """The other side of the byte: a share rounded to a whole byte is within one. Planted:
    to_the_byte's `< 1.0` made `< 0.5`."""
    from minipipe.course.exercises import sharded

    def rounded(*args):
        return {k: rounding(v) for k, v in zero_memory(*args).items()}

    (yours,) = _learners(rounded)
    assert "to the byte" in sharded._check_memory(yours, sharded.memory_cases(random.Random(15)))
