# %% [markdown]
# # Exercise 12 · Data parallelism's bucketed all-reduce
#
# Practises lessons [10 · Tensor and data parallelism](../lessons/10_tensor_and_data_parallelism.ipynb)
# (gradients all-reduced in buckets), [11 · Pipeline vs tensor vs data parallelism](../lessons/11_pp_tp_dp.ipynb)
# (when the buckets go out) and [15 · To production](../lessons/15_to_production.ipynb) (torch's
# DistributedDataParallel). Do [exercise 11](11_tensor_parallel.ipynb) first: the same all-reduce, once a step.
#
# Each data-parallel replica runs the same model on its own shard of the batch; before the optimizer steps,
# every gradient is averaged over the replicas, so all of them take the whole batch's step. One all-reduce per
# parameter would send many tiny messages; one for all of them would wait for the whole backward. DDP groups
# the gradients into **buckets** of about a given number of bytes, the last parameters first (backward
# finishes their gradients first), and all-reduces each bucket as one flat buffer. (torch's reducer adds each
# gradient to the open bucket and closes it once it holds the limit or more, so a bucket's last gradient may
# take it over; it builds these buckets after the first step, in the order the gradients came, and sends the
# first step's in one. minipipe, and this exercise, keep every bucket within the limit.) Here is the model the
# check uses, and its parameters' sizes:

# %%
import torch
import torch.distributed as dist

from minipipe.course.exercises import check_data_parallel
from minipipe.course.exercises.data_parallel import LIMIT, model

net, x, y = model()
params = list(net.parameters())
print([f"{i}: {tuple(p.shape)}, {p.numel() * p.element_size()} bytes" for i, p in enumerate(params)])
print("at most", LIMIT, "bytes a bucket")

# %% [markdown]
# ## Your task
#
# 1. Write `buckets(params, bucket_bytes)`: a list of buckets, each a list of indices into `params`. Take the
#    parameters last first (index $n - 1$ down to 0) and put each into the current bucket while the bucket's
#    gradients stay within `bucket_bytes` (a gradient has as many bytes as its parameter: `numel() *
#    element_size()`); when the next one would not fit, start a new bucket. A bucket may hold exactly
#    `bucket_bytes`; a parameter larger than the limit gets a bucket of its own.
# 2. Write `all_reduce_gradients(params, bucket_bytes, group)`, run after the backward: for each bucket,
#    flatten its gradients into one buffer (`torch.cat` of the `.grad`s, reshaped flat), all-reduce it with
#    `dist.all_reduce(buffer, group=group)` (a sum, in place), divide by the number of replicas
#    (`dist.get_world_size(group)`), and copy each slice back into its parameter's `.grad`.
#
# The check tries `buckets` on parameter lists it draws afresh, then runs `all_reduce_gradients` on 2 and 3
# replicas as threads of this process (every replica must end with the whole batch's gradients, one all-reduce
# per bucket), then on 2 real processes beside torch's own `DistributedDataParallel`.
#
# What your code may call while the check runs it: torch's tensors and `torch.distributed`'s collectives
# (`dist.all_reduce`, `dist.get_world_size`), and nothing of minipipe's (its bucketing included), nor
# torch's DDP or its bucketing; anything else of minipipe's, torch's pipelining, tensor and data parallelism
# and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with the call
# named; threads and processes of its own too. Your own cells may use minipipe to try things.

# %%
def buckets(params, bucket_bytes):
    ### BEGIN SOLUTION
    out, size = [], 0
    for i in reversed(range(len(params))):           # backward finishes the last layers first
        nbytes = params[i].numel() * params[i].element_size()
        if out and size + nbytes <= bucket_bytes:
            out[-1].append(i)
            size += nbytes
        else:                                        # it would not fit (or there is no bucket yet)
            out.append([i])
            size = nbytes
    return out
    ### END SOLUTION


def all_reduce_gradients(params, bucket_bytes, group=None):
    ### BEGIN SOLUTION
    for bucket in buckets(params, bucket_bytes):
        flat = torch.cat([params[i].grad.reshape(-1) for i in bucket])   # one buffer: one message
        dist.all_reduce(flat, group=group)                               # the replicas' sum
        flat /= dist.get_world_size(group)                               # DDP averages
        offset = 0
        for i in bucket:
            n = params[i].numel()
            params[i].grad.copy_(flat[offset:offset + n].view_as(params[i]))
            offset += n
    ### END SOLUTION


# %% tags=["check"]
check_data_parallel(buckets, all_reduce_gradients)

# %% [markdown]
# Once it passes: DDP starts each bucket's all-reduce during the backward, as soon as its last gradient is
# final. Which bucket can start first, and what would waiting for the whole backward cost (lesson 11's timeline
# shows it)? How many bytes does each replica send per step (the ring all-reduce's $2\frac{n-1}{n}$)?
#
# From a terminal: `minipipe check exercises/12_bucketed_all_reduce.ipynb`.
