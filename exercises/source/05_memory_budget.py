# %% [markdown]
# # Exercise 05 · Memory budget
#
# Practises lessons [04 · 1F1B](../lessons/04_one_f_one_b.ipynb) and
# [03 · Micro-batches and GPipe](../lessons/03_microbatches_gpipe.ipynb) (the price of $m$). Do
# exercises [02](02_write_gpipe.ipynb) and [03](03_one_f_one_b.ipynb) first.
#
# Between a micro-batch's forward and its backward, each stage keeps the activations autograd needs for the
# backward. How many micro-batches a rank holds at once depends on the schedule, and that decides whether a
# model fits on a device. The engine counts the bytes one micro-batch keeps on each stage; here for the
# course MLP cut into 2 stages (the last stage also keeps what the loss needs):

# %%
from minipipe import RunConfig, make_schedule, simulate
from minipipe.course.exercises import check_memory_budget
from minipipe.course.exercises.memory import bytes_per_microbatch
from minipipe.course.exercises.runs import TINY

config = RunConfig(schedule="gpipe", p=2, m=4, **TINY)
print("bytes one micro-batch keeps, per rank:", bytes_per_microbatch(config))

# %% [markdown]
# ## Your task
#
# 1. Write `peak_bytes(kind, p, m, rank, per_microbatch)`: the most bytes of activations `rank` holds at once
#    in one step of `kind` (`"gpipe"` or `"1f1b"`), when one micro-batch keeps `per_microbatch` bytes there.
# 2. Write `largest_m(kind, p, budget, per_microbatch)`: the largest number of micro-batches $m \le 64$ for
#    which no rank holds more than `budget` bytes (0 if not even one fits). Each micro-batch keeps
#    `per_microbatch` bytes on every rank; its size is fixed, so a larger $m$ means a larger batch.
#
# The check compares `peak_bytes` with simulated schedules on 76 cases (including $m < p$), most of them drawn
# afresh each time, `largest_m` with a search over every $m$, and then trains GPipe and 1F1B on 2 real processes
# and compares your predictions with the bytes each rank measured. Work the count out from the order of each
# schedule.
#
# What your code may call while the check runs it: nothing of minipipe's (its formulas, schedules and
# simulator included): plain Python on the arguments; anything else of minipipe's, torch's pipelining,
# tensor and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks)
# is refused, with the call named; threads and processes of its own too. Your own cells may use minipipe to
# try things.

# %%
def peak_bytes(kind, p, m, rank, per_microbatch):
    ### BEGIN SOLUTION
    held = m if kind == "gpipe" else min(p - rank, m)      # GPipe holds all m; 1F1B's rank r at most p − r
    return held * per_microbatch
    ### END SOLUTION


def largest_m(kind, p, budget, per_microbatch):
    ### BEGIN SOLUTION
    fitting = [m for m in range(1, 65)
               if all(peak_bytes(kind, p, m, r, per_microbatch) <= budget for r in range(p))]
    return max(fitting, default=0)
    ### END SOLUTION


# %% tags=["check"]
check_memory_budget(peak_bytes, largest_m)

# %% [markdown]
# Once it passes: with a budget of 40 micro-batches' bytes per rank and p = 8, how large can $m$ be under
# GPipe and under 1F1B, and what is the bubble of each? Lesson 03 asks the same question
# with the batch size fixed instead: what changes?
#
# From a terminal: `minipipe check exercises/05_memory_budget.ipynb`.
