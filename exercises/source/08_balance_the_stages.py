# %% [markdown]
# # Exercise 08 · Balance the stages
#
# Practises lesson [06 · Balance](../lessons/06_balance.ipynb).
#
# A pipeline runs at the pace of its slowest stage: every other rank waits for it once per micro-batch. So
# the layers must be cut into $p$ contiguous stages whose costs are as even as they can be, or more exactly:
# whose **largest** cost is as small as it can be. And the costs must be the ones the pipeline waits for.
#
# A cut is given by its bounds: stage $s$ owns layers `bounds[s]` to `bounds[s+1] − 1`. Six equal layers on
# three stages: `(0, 2, 4, 6)`.

# %%
import statistics
import time

import torch

from minipipe import make_task
from minipipe.course.exercises import check_balance

costs = [5.0, 1.0, 1.0, 1.0, 1.0, 1.0]
bounds = (0, 3, 6)                      # three layers each: by count, even; by cost, 7 against 3
print([sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])])

# %% [markdown]
# ## Your task, part 1
#
# Write `balance(costs, p)`: the bounds of a cut of `costs` (one number per layer) into `p` contiguous,
# non-empty stages whose slowest stage costs as little as possible. Trying every cut is too slow for long
# models; think of the best cut of the first $j$ layers into $s$ stages, built from the best cuts into
# $s - 1$ stages (dynamic programming), or of searching for the smallest cost limit that $p$ stages can keep.
# The check tries it on cost lists it draws afresh each time, short ones and long ones: 60 to 80 layers in
# 10 to 16 stages, where there are $\binom{n-1}{p-1} > 10^{10}$ cuts to try. On those it allows 30 times what
# its own dynamic programme takes on the same list (and 2 s at least).
#
# What your code may call while the check runs it: the course models (`minipipe.models`, to run the GPT's
# layers), plain torch and Python (`time.perf_counter`); not minipipe's partitioner or profiler; anything
# else of minipipe's, torch's pipelining, tensor and data parallelism and FSDP, and the frameworks
# (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with the call named; threads and processes of
# its own too. Your own cells may use minipipe to try things.

# %%
def balance(costs, p):
    ### BEGIN SOLUTION
    n = len(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]     # best[s][j]: slowest stage, layers 0..j-1 in s stages
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for s in range(1, p + 1):
        for j in range(s, n + 1):
            for i in range(s - 1, j):                   # the last stage is layers i..j-1
                slowest = max(best[s - 1][i], prefix[j] - prefix[i])
                if slowest < best[s][j]:
                    best[s][j], cut[s][j] = slowest, i
    bounds = [n]
    for s in range(p, 0, -1):
        bounds.append(cut[s][bounds[-1]])
    return tuple(reversed(bounds))
    ### END SOLUTION


# %% [markdown]
# ## Part 2: what to weigh
#
# The tiny GPT of lesson 06 has an embedding, three blocks and a head. Write `layer_costs(layers, sample)`:
# one cost per layer, the measure you would give `balance` to cut this model (or any GPT) for a pipeline.
# `sample` is one micro-batch of its input; each layer's input is the previous layer's output. Measure it yourself
# (`time.perf_counter()` around a forward and a backward, a few times). Here are the layers' parameter
# counts:

# %%
task = make_task("gpt", batch_size=64, vocab=1536, width=32, block=64, depth=3)
for i, layer in enumerate(task.layers()):
    print(i, type(layer).__name__, f"{sum(t.numel() for t in layer.parameters()):,} parameters")


# %%
def layer_costs(layers, sample):
    ### BEGIN SOLUTION
    costs, x = [], sample
    for layer in layers:
        if x.is_floating_point():
            x = x.detach().requires_grad_()     # a later stage also computes its input's gradient
        times = []
        for _ in range(7):
            start = time.perf_counter()
            layer(x).sum().backward()           # forward and backward: what the pipeline waits for
            times.append(time.perf_counter() - start)
        costs.append(statistics.median(times[2:]))   # the first runs warm up; the median ignores a hiccup
        with torch.no_grad():
            x = layer(x)
    return costs
    ### END SOLUTION


# %% [markdown]
# The check compares `balance` with the exact optimum on 65 short cases (every cut tried) and 3 long ones,
# times the layers itself, of this GPT and of two others (one with a vocabulary of 8192, one with wide blocks and
# a vocabulary of 64), and asks that your costs order the embedding, the blocks and the head as its own clock does
# wherever that clock finds them 3 times apart or more. Then it trains the GPT on 2 real processes with your cut
# and, beside it, with the cut by parameters, and shows how long each rank was busy and idle.

# %% tags=["check"]
check_balance(balance, layer_costs)

# %% [markdown]
# Once it passes: is the measured run as even as your costs promised? Measured times on a shared machine
# vary from run to run; which numbers in the verdict would you trust, and why?
#
# From a terminal: `minipipe check exercises/08_balance_the_stages.ipynb`.
