# %% [markdown]
# # Exercise 11 · Tensor parallelism's f and g
#
# Practises lesson [10 · Tensor and data parallelism](../lessons/10_tensor_and_data_parallelism.ipynb) (Megatron's
# f and g). Do [exercise 01](01_scale_the_loss.ipynb) first: a backward is autograd's, and yours to shape.
#
# Tensor parallelism cuts inside a layer. In an MLP block $y = \mathrm{out}(\mathrm{gelu}(\mathrm{fc}(x)))$,
# Megatron gives each of the $t$ ranks a slice of fc's output features (column-parallel: rows of its weight)
# and the matching slice of out's input features (row-parallel: columns of its weight). Rank $i$ then computes
# $\mathrm{gelu}(x A_i^\top + b_i) B_i^\top$ from the whole input $x$: a partial product, and the block's output
# is the sum of the ranks' partials, plus out's bias once. Two autograd functions make that work:
#
# - **f**, before fc: the identity in the forward (every rank reads the whole $x$); in the backward, the sum over
#   the ranks (all-reduce) of each rank's share of $x$'s gradient;
# - **g**, after out: the sum over the ranks (all-reduce) in the forward; the identity in the backward (every
#   rank's partial product gets the whole output's gradient).
#
# Here is the split block, built by the checker around two functions of yours, and the unsplit one:

# %%
import torch
import torch.distributed as dist

from minipipe.course.exercises import check_tensor_parallel
from minipipe.course.exercises.tensor_parallel import block, shard_of

fc, out, x, target = block()
print("unsplit:", fc, out, "input", tuple(x.shape))
print("rank 0 of 2 keeps:", {name: tuple(t.shape) for name, t in shard_of(0, 2).items()})

# %% [markdown]
# ## Your task
#
# Write `Copy` (f) and `Reduce` (g), two subclasses of `torch.autograd.Function`, each with
# `forward(ctx, x, group)` and `backward(ctx, grad)`. `group` is the tensor-parallel process group (the check
# hands you one: its ranks as threads, then torch's group of the 2 processes). All-reduce with
# `dist.all_reduce(tensor, group=group)`: it sums `tensor` over the ranks, **in place**. An autograd function must
# not change its input (or the gradient it is handed) in place: all-reduce a copy (`.clone()`); the check looks.
# A backward returns one gradient per input of the forward: `(grad_x, None)`, none for the group.
#
# The check runs the split block (the code is `run_rank` in `minipipe/course/exercises/tensor_parallel.py`) on
# one rank, then on 2 ranks as threads of this process (quick, and it counts your all-reduces), then on 2 real
# processes, and compares the output and every gradient with the unsplit block's.
#
# What your code may call while the check runs it: torch's tensors, autograd and `torch.distributed`'s
# collectives (`dist.all_reduce`), and nothing of minipipe's (its own f and g, `CopyToTP` and
# `ReduceFromTP`, included); `block` and `shard_of` above are for your cells; anything else of minipipe's,
# torch's pipelining, tensor and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX,
# minipipe.frameworks) is refused, with the call named; threads and processes of its own too. Your own cells
# may use minipipe to try things.

# %%
class Copy(torch.autograd.Function):
    """f: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x, group):
        ### BEGIN SOLUTION
        ctx.group = group
        return x.view_as(x)                      # the same values; a new tensor for autograd's graph
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        grad = grad.clone()                      # autograd may hand this buffer to others too
        dist.all_reduce(grad, group=ctx.group)   # the ranks' shares of x's gradient, summed
        return grad, None
        ### END SOLUTION


class Reduce(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        ### BEGIN SOLUTION
        x = x.clone()                            # not the input itself: it is autograd's
        dist.all_reduce(x, group=group)          # the partial products, summed: the whole output
        return x
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad, None                        # every partial product's gradient is the output's
        ### END SOLUTION


# %% tags=["check"]
check_tensor_parallel(Copy, Reduce)

# %% [markdown]
# Once it passes: what does each rank send per block, forward and backward, for a micro-batch of $b \cdot s$
# tokens of width $h$ (lesson 11 measured it)? Why does a Transformer block need two such pairs, and why does
# tensor parallelism stay inside a node?
#
# From a terminal: `minipipe check exercises/11_tensor_parallel.ipynb`.
