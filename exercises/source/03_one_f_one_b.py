# %% [markdown]
# # Exercise 03 · Write 1F1B
#
# Practises lesson [04 · 1F1B](../lessons/04_one_f_one_b.ipynb). Do [exercise 02](02_write_gpipe.ipynb) first.
#
# GPipe holds the activations of all $m$ micro-batches on every rank. 1F1B does the same work in another
# order, so that rank $r$ never holds more than $p - r$:
#
# - **warm-up**: rank $r$ runs the forwards of the first $p - r - 1$ micro-batches (fewer if $m$ is smaller);
# - **steady state**: then one forward and one backward in turn, the backward of the oldest micro-batch it holds;
# - **cool-down**: the backwards it still owes.
#
# (Lesson 04 counts $p - r$ warm-up forwards: this steady state's first forward is its warm-up's last. The same
# schedule; here each steady-state step is a forward then a backward, there a backward then a forward.)
#
# Actions are `F(stage, mb)` and `B(stage, mb)`; rank `r` owns stage `r`. Here is GPipe again, to compare:

# %%
from minipipe import Schedule, make_schedule, simulate
from minipipe.course.exercises import check_one_f_one_b
from minipipe.schedule.ops import B, F

gpipe = make_schedule("gpipe", p=3, m=4)
print(gpipe)
print("peak micro-batches held per rank:", simulate(gpipe).peak_inflight())

# %% [markdown]
# ## Your task
#
# Write `one_f_one_b(p, m)`: one plain list of actions per rank, in 1F1B's order. It must work for $m < p$ too.
#
# The check runs it for p = 1…5 and m = 1…9, and on sizes it draws afresh each time (one of them large), and
# asks: does the validator accept it; is it as fast as GPipe, $(m + p - 1)(f + b)$; does rank $r$ hold at most
# $\min(p - r, m)$ micro-batches; does a backward follow every forward after the warm-up; and on 2 real
# processes, does it give the whole model's losses? A warm-up one forward too long still runs, but holds a
# micro-batch more than it must; one too short deadlocks, or idles.
#
# What your code may call while the check runs it: the actions (`F`, `B`, ... from `minipipe.schedule.ops`),
# `Schedule`, `validate` and `simulate` (with `Costs`) on your own lists (`make_schedule`, which printed
# GPipe above, is not among them), and plain Python; anything else of minipipe's, torch's pipelining, tensor
# and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is
# refused, with the call named; threads and processes of its own too. Your own cells may use minipipe to try
# things.

# %%
def one_f_one_b(p, m):
    ### BEGIN SOLUTION
    lists = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        for i in range(m - warmup):                  # steady state: the next forward, the oldest backward
            acts += [F(r, warmup + i), B(r, i)]
        acts += [B(r, mb) for mb in range(m - warmup, m)]   # cool-down
        lists.append(acts)
    return lists
    ### END SOLUTION


# %% tags=["check"]
check_one_f_one_b(one_f_one_b)

# %% [markdown]
# Once it passes, compare your grid with GPipe's above: `print(Schedule.custom(one_f_one_b(3, 4)))`. The
# step takes as long; which rank holds fewer micro-batches, and how many fewer?
#
# From a terminal: `minipipe check exercises/03_one_f_one_b.ipynb`.
