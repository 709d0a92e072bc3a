# %% [markdown]
# # Exercise 02 · Write GPipe
#
# Practises lesson [03 · Micro-batches and GPipe](../lessons/03_microbatches_gpipe.ipynb).
#
# In minipipe a schedule is data: for each rank, the list of actions it runs, in order. `F(s, mb)` is the
# forward of micro-batch `mb` on stage `s`, and `B(s, mb)` its backward. With one stage per rank, rank `r`
# owns stage `r`. The engine works out every message itself: a forward on stage `s` needs the output of
# stage `s − 1`'s forward of the same micro-batch, a backward needs the gradient from stage `s + 1`.
#
# Here is naive model parallelism, one micro-batch at a time, for p = 2 ranks and m = 3 micro-batches.
# The grid shows time steps down and ranks across, each action placed where it can start (`.` is idle):

# %%
from minipipe import Schedule, simulate
from minipipe.course.exercises import check_gpipe
from minipipe.schedule.ops import B, F


def naive(p, m):
    return [[action for mb in range(m) for action in (F(r, mb), B(r, mb))] for r in range(p)]


print(Schedule.custom(naive(2, 3)))
print("step time with forward 1, backward 2:", simulate(Schedule.custom(naive(2, 3))).makespan)

# %% [markdown]
# ## Your task
#
# Write `gpipe(p, m)`: it returns one plain list of actions per rank, GPipe's order. Every rank runs the
# forwards of all `m` micro-batches in order (the pipeline fills), then all their backwards (it drains),
# **newest first**: the backward of micro-batch $m - 1$, then $m - 2$, ..., down to 0. Lesson 03's GPipe (the
# engine's) runs the backwards oldest first; the newest-first order is the one autograd follows when the
# micro-batches' losses are summed and a single backward runs. Does it cost time? The check will tell.
#
# The check runs your function on a few fixed sizes and on sizes it draws afresh each time (one of them large),
# and asks, in this order:
# 1. does the validator accept it: every forward and backward present once, on its rank, and no deadlock?
# 2. is it as fast as GPipe under a cost model (forward 1, backward 2 time units): $(m + p - 1)(f + b)$?
# 3. does every rank hold all $m$ micro-batches at the turn from forwards to backwards, as GPipe does?
# 4. does each rank run its backwards newest first?
# 5. trained for real on 2 processes, does it give the same losses as the whole model on one process?
#
# What your code may call while the check runs it: the actions (`F`, `B`, ... from `minipipe.schedule.ops`),
# `Schedule`, `validate` and `simulate` (with `Costs`) on your own lists, and plain Python; anything else of
# minipipe's, torch's pipelining, tensor and data parallelism and FSDP, and the frameworks (DeepSpeed,
# Megatron, JAX, minipipe.frameworks) is refused, with the call named; threads and processes of its own too.
# Your own cells may use minipipe to try things.

# %%
def gpipe(p, m):
    ### BEGIN SOLUTION
    return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)]
    ### END SOLUTION


# %% tags=["check"]
check_gpipe(gpipe)

# %% [markdown]
# Once it passes, look at your schedule: `print(Schedule.custom(gpipe(4, 8)))`. Where are the idle steps,
# and how many are there on each rank? Lesson 03 counts them: $(p - 1)(f + b)$ per rank. Why does the order of
# the backwards not change the step time, nor the memory at the turn?
#
# From a terminal, `minipipe check exercises/02_write_gpipe.ipynb` runs this notebook and prints the verdict.
