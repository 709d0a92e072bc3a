# %% [markdown]
# # Exercise 15 · Sharded data parallelism: FSDP's bytes, ZeRO's memory
#
# Practises lessons [12 · Choosing a split](../lessons/12_choosing_a_split.ipynb) (FSDP: each rank
# keeps 1/n of every kind of state, and gathers a layer's parameters when it runs) and
# [15 · To production](../lessons/15_to_production.ipynb) (FSDP for real, with torch's
# `fully_shard`). Do [exercise 12](12_bucketed_all_reduce.ipynb) first: plain data parallelism, whose
# all-reduce FSDP splits in two.
#
# FSDP (ZeRO stage 3) is data parallelism over n ranks in which every rank keeps only a shard of each
# parameter, its gradient and its optimizer state. Each FSDP **unit** (here: each layer) is gathered whole just
# before it runs. In one training step, per unit:
#
# - an **all-gather** of its parameters before its forward; the gathered copy is freed after the forward and
#   gathered **again** before its backward;
# - a **reduce-scatter** of its gradients after its backward: each rank keeps the averaged shard it owns.
#
# In a ring, each rank sends $\frac{n-1}{n}$ of the buffer in an all-gather or a reduce-scatter. FSDP cuts each
# parameter along its first dimension into n equal shards, so a first dimension that n does not divide is
# **padded** up to a multiple of n (and the padding is gathered too). Here are the course MLP's units, as lists of
# parameter shapes:

# %%
import math

from minipipe.course.exercises import check_sharded
from minipipe.models.catalog import make_task
from minipipe.planner import presets
from minipipe.planner.shapes import layer_parameters, parameters

units = [[tuple(q.shape) for q in layer.parameters()] for layer in make_task("mlp", width=33, depth=3).layers()]
print(units)
llama = presets.model("llama2-7b")
print(f"{llama.name}: {parameters(llama):,} parameters, {llama.layers} blocks of {layer_parameters(llama):,}")

# %% [markdown]
# ## Your task
#
# **1. FSDP's bytes.** Write `fsdp_bytes(units, n)`: for `units`, a list of FSDP units each given as a list of
# parameter shapes (fp32: 4 bytes a value), return `{"all-gather": ..., "reduce-scatter": ...}`, the bytes one
# rank sends in one training step, by collective.
#
# **2. ZeRO's memory.** Mixed-precision training with Adam keeps, per parameter, 2 bytes of bf16 weights, 2 bytes
# of bf16 gradients and 12 bytes of optimizer state (an fp32 master copy of the weights and Adam's two fp32
# moments), and torch adds one 4-byte step count per parameter **tensor**. ZeRO shards this over the n
# data-parallel ranks in stages: **ZeRO-1** the optimizer state (the step counts stay whole on every rank),
# **ZeRO-2** the gradients too, but a rank holds one block's whole gradients until their reduce-scatter,
# **ZeRO-3** (FSDP) the parameters too, but a rank holds two blocks' gathered bf16 parameters at once (the one
# running and the next, prefetched). ZeRO-0 is plain data parallelism: nothing sharded. Write
# `zero_memory(parameters, tensors, block, n, zero)`: for a model of `parameters` elements in `tensors` tensors,
# blocks of `block` elements, return `{"parameters": ..., "gradients": ..., "optimizer": ...}`, the bytes one rank
# holds under ZeRO stage `zero` (0 to 3).
#
# The check compares 1 with FSDP's formula on units drawn afresh (odd shapes, n up to 64), then with what torch's
# own `fully_shard` sends on 2 real processes, counted at its collectives; and 2 with the planner's memory model on
# the catalogue's models and on model shapes drawn afresh, to the byte (a small term left out is wrong however
# large the model). Compute from the arguments.
#
# What your code may call while the check runs it: nothing of minipipe's (its FSDP, ring formula, planner
# and presets included): plain Python on the arguments; anything else of minipipe's, torch's pipelining,
# tensor and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks)
# is refused, with the call named; threads and processes of its own too. Your own cells may use minipipe to
# try things.

# %%
def fsdp_bytes(units, n):
    ### BEGIN SOLUTION
    # each parameter as FSDP gathers it: its first dimension padded to a multiple of n
    gathered = sum(-(-shape[0] // n) * n * math.prod(shape[1:]) * 4 for unit in units for shape in unit)
    share = (n - 1) / n * gathered            # a ring all-gather or reduce-scatter: (n−1)/n of the buffer each
    return {"all-gather": 2 * share, "reduce-scatter": share}      # gathered for the forward, again for the backward
    ### END SOLUTION


def zero_memory(parameters, tensors, block, n, zero):
    ### BEGIN SOLUTION
    weights, grads = 2 * parameters, 2 * parameters                      # bf16
    optimizer = 12 * parameters / (n if zero >= 1 else 1) + 4 * tensors   # the step counts are not sharded
    if zero >= 2:
        grads = grads / n + 2 * block             # and one block's whole gradients, before their reduce-scatter
    if zero == 3:
        weights = weights / n + 2 * 2 * block     # and two blocks gathered: the one running, the one prefetched
    return {"parameters": weights, "gradients": grads, "optimizer": optimizer}
    ### END SOLUTION


# %% tags=["check"]
check_sharded(fsdp_bytes, zero_memory)

# %% [markdown]
# Once it passes: how many times plain data parallelism's all-reduce does FSDP send (lesson 15 measured it)? For
# Llama 2 7B on 8 ranks, which ZeRO stage first fits in an 80 GB GPU, before any activation? And what does ZeRO-3
# cost that ZeRO-2 does not?
#
# From a terminal: `minipipe check exercises/15_sharded_data_parallel.ipynb`.
