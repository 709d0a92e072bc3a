# %% [markdown]
# # Exercise 07 · Interleaved 1F1B
#
# Practises lesson [05 · Interleaved stages](../lessons/05_interleaved.ipynb). Do [exercise 03](03_one_f_one_b.ipynb)
# first: this is 1F1B again, over chunks.
#
# With interleaving each rank holds $v$ chunks of the model instead of one: the model is cut into $p \cdot v$
# stages, and each chunk costs $1/v$ of a rank's share. Two things to decide: where the chunks go, and in
# which order each rank runs them. Here is 1F1B for p = 2, m = 4 on the same 2-rank pipeline, to compare:

# %%
from minipipe import Schedule, make_schedule, simulate
from minipipe.course.exercises import check_interleaved
from minipipe.schedule.ops import B, F

one_f_one_b = make_schedule("1f1b", p=2, m=4)
print(one_f_one_b)
print("step time with forward 1, backward 2:", simulate(one_f_one_b).makespan)

# %% [markdown]
# ## Your task, part 1: place the chunks
#
# Write `placement(p, v)`: a list of $p \cdot v$ ranks, the rank that owns each stage. Megatron's interleaving
# sends the activations round the ring of ranks $v$ times: stage 0 on rank 0, stage 1 on rank 1, ..., stage
# $p$ back on rank 0.
#
# ## Part 2: write the order
#
# Write `interleaved(p, m, v)`: one plain list of actions per rank, `F(stage, mb)` and `B(stage, mb)`, for $m$
# a multiple of $p$. The order that works (Megatron's): take the micro-batches in groups of $p$. A rank runs
# the forwards of a group through its first chunk, then through its second, ..., then the next group; its
# backwards go the same way with the chunks taken last first. Rank $r$ starts with a warm-up of
# $2(p - r - 1) + (v - 1)p$ forwards (at most all $m \cdot v$), then runs one forward and one backward in turn,
# then the backwards it still owes.
#
# The check asks: does your placement go round the ring; does the validator accept your lists on it (for
# sizes fixed and drawn afresh, one of them large); is the step $(m + (p - 1)/v)(f + b)$ long; does no rank
# hold more chunks than its warm-up needs; and on 2 real processes with $v = 2$, does it give the whole
# model's losses?
#
# What your code may call while the check runs it: the actions (`F`, `B`, ... from `minipipe.schedule.ops`),
# `Schedule`, `validate` and `simulate` (with `Costs`) on your own lists, and plain Python; anything else of
# minipipe's, torch's pipelining, tensor and data parallelism and FSDP, and the frameworks (DeepSpeed,
# Megatron, JAX, minipipe.frameworks) is refused, with the call named; threads and processes of its own too.
# Your own cells may use minipipe to try things.

# %%
def placement(p, v):
    ### BEGIN SOLUTION
    return [s % p for s in range(p * v)]       # round the ring of ranks, v times
    ### END SOLUTION


def interleaved(p, m, v):
    ### BEGIN SOLUTION
    total = m * v                                # forwards per rank, counting every chunk

    def stage(k, r, forward):                    # the k-th forward (or backward) of rank r: which chunk ...
        chunk = (k // p) % v
        return (chunk if forward else v - 1 - chunk) * p + r

    def micro_batch(k):                          # ... and which micro-batch of its group of p
        return (k // (p * v)) * p + k % p

    lists = []
    for r in range(p):
        warmup = min(2 * (p - r - 1) + (v - 1) * p, total)
        acts = [F(stage(k, r, True), micro_batch(k)) for k in range(warmup)]
        for i in range(total - warmup):          # steady state: the next forward, the oldest backward
            acts += [F(stage(warmup + i, r, True), micro_batch(warmup + i)), B(stage(i, r, False), micro_batch(i))]
        acts += [B(stage(k, r, False), micro_batch(k)) for k in range(total - warmup, total)]
        lists.append(acts)
    return lists
    ### END SOLUTION


# %% tags=["check"]
check_interleaved(placement, interleaved)

# %% [markdown]
# Once it passes, compare your grid with 1F1B's above: `print(Schedule.custom(interleaved(2, 4, 2), v=2))`.
# How much shorter is the step, how many more messages cross between the ranks (lesson 05 counts them), and
# how many more chunks does rank 0 hold at its peak?
#
# From a terminal: `minipipe check exercises/07_interleaved_1f1b.ipynb`.
