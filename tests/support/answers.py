"""Learners' answers the exercise tests share: the hand-written f and g, the bucketed all-reduce (exercise 11,
12) and the sharded data parallelism's arithmetic (exercise 15), right and wrong, used by
tests/course/test_exercise_parallel.py, tests/course/test_exercise_sharded.py and
tests/course/test_exercise_bounds_parallel.py."""

import math

import torch


# -- 11 tensor parallelism ------------------------------------------------------------------------
class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        torch.distributed.all_reduce(grad, group=ctx.group)
        return grad, None


class Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        torch.distributed.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# -- 12 the bucketed all-reduce ---------------------------------------------------------------------
def _buckets(params, bucket_bytes):
    out, size = [], 0
    for i in reversed(range(len(params))):
        n = params[i].numel() * params[i].element_size()
        if out and size + n <= bucket_bytes:
            out[-1].append(i)
            size += n
        else:
            out.append([i])
            size = n
    return out


def _reduce(per_bucket=True, mean=True, buckets=_buckets):
    def all_reduce_gradients(params, bucket_bytes, group=None):
        groups = buckets(params, bucket_bytes) if per_bucket else [[i] for i in range(len(params))]
        for bucket in groups:
            flat = torch.cat([params[i].grad.reshape(-1) for i in bucket])
            torch.distributed.all_reduce(flat, group=group)
            if mean:
                flat /= torch.distributed.get_world_size(group)
            offset = 0
            for i in bucket:
                n = params[i].numel()
                params[i].grad.copy_(flat[offset : offset + n].view_as(params[i]))
                offset += n

    return all_reduce_gradients


def fsdp_bytes(units, n):
    return ring(units, n)


def zero_memory(parameters, tensors, block, n, zero, steps=True, master=True, block_grads=True, gathered=True):
    params, grads = 2 * parameters, 2 * parameters
    optimizer = (12 if master else 8) * parameters / (n if zero else 1) + (4 * tensors if steps else 0)
    if zero >= 2:
        grads = grads / n + (2 * block if block_grads else 0)
    if zero == 3:
        params = params / n + (4 * block if gathered else 0)
    return {"parameters": params, "gradients": grads, "optimizer": optimizer}


# the reference answers (as in the solution), to vary one at a time
def ring(units, n, gathers=2, pad=True, share=None):
    gathered = sum(
        (-(-shape[0] // n) * n if pad else shape[0]) * math.prod(shape[1:]) * 4 for unit in units for shape in unit
    )
    each = (n - 1) / n * gathered if share is None else share(gathered, n)
    return {"all-gather": gathers * each, "reduce-scatter": each}
