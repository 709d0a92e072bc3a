# %% [markdown]
# # Exercise 10 · Zero bubble (ZB-H1)
#
# Practises lesson [09 · Zero bubble](../lessons/09_zero_bubble.ipynb). Do [exercise 03](03_one_f_one_b.ipynb)
# first: ZB-H1 is 1F1B with its backwards split.
#
# A backward is two jobs: `I(stage, mb)`, the input gradient, which the previous stage waits for, and
# `W(stage, mb)`, the weight gradient, which nobody waits for (only the optimizer, at the end of the step). A
# micro-batch's activations stay until its W. Here is 1F1B with every backward split but nothing moved, each W
# right after its I, for p = 3, m = 6, with f = 1, b = 2 and w = 1 (the W half of b):

# %%
from minipipe import Costs, Schedule, simulate
from minipipe.course.exercises import check_zero_bubble
from minipipe.schedule.ops import F, I, W

costs = Costs(forward=1.0, backward=2.0, weight=1.0)


def split_1f1b(p, m):
    lists = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        for i in range(m - warmup):
            acts += [F(r, warmup + i), I(r, i), W(r, i)]
        acts += [a for mb in range(m - warmup, m) for a in (I(r, mb), W(r, mb))]
        lists.append(acts)
    return lists


trace = simulate(Schedule.custom(split_1f1b(3, 6)), costs)
print(Schedule.custom(split_1f1b(3, 6)))
print("step time:", trace.makespan, " micro-batches held per rank:", trace.peak_inflight())

# %% [markdown]
# ## Your task
#
# Write `zb_h1(p, m)` for $m \ge p$: one plain list of actions per rank, 1F1B's order with every B replaced by
# its I, and each W moved later to fill the idle slots of the cool-down. Rank $r$ may keep up to $r$ W's
# waiting: after each I, if more than $r$ are owed, run the oldest; the last ones close the step.
#
# The check asks: does the validator accept it (sizes fixed and drawn afresh, one of them large); is every
# backward split; is the step $m(f + b) + (p - 1)(f + b - 2w)$ long, with $w = 1$ and with $w = 0.5$; does
# no rank hold more than $p$ micro-batches, 1F1B's peak; and on 2 real processes, does it give the whole
# model's losses?
#
# What your code may call while the check runs it: the actions (`F`, `I`, `W`, ... from
# `minipipe.schedule.ops`), `Schedule`, `validate` and `simulate` (with `Costs`) on your own lists, and
# plain Python; anything else of minipipe's, torch's pipelining, tensor and data parallelism and FSDP, and
# the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with the call named; threads
# and processes of its own too. Your own cells may use minipipe to try things.

# %%
def zb_h1(p, m):
    ### BEGIN SOLUTION
    lists = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        waiting = []                             # W's not run yet, oldest first

        def backward(mb):
            acts.append(I(r, mb))
            waiting.append(W(r, mb))
            if len(waiting) > r:                 # rank r lets r of them wait
                acts.append(waiting.pop(0))      # the oldest: its activations are freed first

        for i in range(m - warmup):              # steady state: one forward, one I (and a W)
            acts.append(F(r, warmup + i))
            backward(i)
        for mb in range(m - warmup, m):          # cool-down
            backward(mb)
        lists.append(acts + waiting)             # the last W's close the step
    return lists
    ### END SOLUTION


# %% tags=["check"]
check_zero_bubble(zb_h1)

# %% [markdown]
# Once it passes, simulate yours beside `split_1f1b` above at p = 3, m = 6: how much idle time did the W's
# fill, and what did it cost in memory on each rank? Why can rank 0 not put off any W?
#
# From a terminal: `minipipe check exercises/10_zero_bubble.ipynb`.
