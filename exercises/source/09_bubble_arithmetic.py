# %% [markdown]
# # Exercise 09 · Bubble arithmetic
#
# Practises lessons [03 · Micro-batches and GPipe](../lessons/03_microbatches_gpipe.ipynb),
# [04 · 1F1B](../lessons/04_one_f_one_b.ipynb), [05 · Interleaved stages](../lessons/05_interleaved.ipynb) and
# [07 · Communication](../lessons/07_communication.ipynb) (what the messages cost). Do
# [exercise 07](07_interleaved_1f1b.ipynb) first: you will count what you wrote there.
#
# Work out, with pencil first, how long one training step of a pipeline takes and how much of it is idle.
# The notation is the course's:
#
# - $p$ ranks, $m$ micro-batches per step, $v$ stages (chunks) per rank: $v = 1$ except for interleaved 1F1B;
# - $f$ and $b$: the forward and backward time of one micro-batch through **a rank's share of the model**.
#   With $v$ chunks per rank each chunk costs $f/v$ and $b/v$: the model is the same whatever $v$ is;
# - messages are free (no latency), and every stage costs the same.
#
# The simulator below replays a schedule on exactly these costs. Use it to test your ideas, but your
# functions must compute the answer from $p, m, v, f, b$ alone.
#
# What your code may call while the check runs it: nothing of minipipe's (its formulas, schedules and
# simulator included): plain Python on the arguments; anything else of minipipe's, torch's pipelining,
# tensor and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks)
# is refused, with the call named; threads and processes of its own too. Your own cells may use minipipe to
# try things.

# %%
from minipipe import Costs, make_schedule, simulate
from minipipe.course.exercises import check_bubble_arithmetic

s = make_schedule("interleaved", p=2, m=4, v=2)
trace = simulate(s, Costs(forward=1.0, backward=2.0))
print(s)
print(f"makespan {trace.makespan:g}, bubble {trace.bubble():.4f}, messages {len(s.messages)}")

# %% [markdown]
# ## Your task
#
# Write three functions, for `kind` one of `"gpipe"`, `"1f1b"` and `"interleaved"`:
#
# - `makespan(kind, p, m, v, f, b)`: the time of one step, from the first forward to the last backward;
# - `bubble(kind, p, m, v, f, b)`: the share of all ranks' time spent idle, $\text{idle} / (p \cdot \text{makespan})$
#   (idle over total, as in this course; not idle over the ideal time);
# - `messages(kind, p, m, v)`: point-to-point messages between ranks in one training step, activations
#   going forward and gradients coming back (neighbouring stages on the same rank need none).
#
# The check compares each with the simulator on 40 cases per kind, drawn afresh each time, p up to 8, m up to 32.

# %%
def makespan(kind, p, m, v, f, b):
    ### BEGIN SOLUTION
    return (m + (p - 1) / v) * (f + b)      # m micro-batches of work, plus p − 1 fill-and-drain chunks
    ### END SOLUTION


def bubble(kind, p, m, v, f, b):
    ### BEGIN SOLUTION
    return 1 - m * (f + b) / makespan(kind, p, m, v, f, b)      # each rank works m (f + b)
    ### END SOLUTION


def messages(kind, p, m, v):
    ### BEGIN SOLUTION
    return 0 if p == 1 else 2 * m * (p * v - 1)      # p·v − 1 boundaries, each crossed there and back
    ### END SOLUTION


# %% tags=["check"]
check_bubble_arithmetic(makespan, bubble, messages)

# %% [markdown]
# Once it passes: GPipe and 1F1B share one formula. Why? And at p = 4, m = 8, how much shorter is the
# interleaved step with v = 2, and how many more messages does it send? (Lesson 05 measured both.)
#
# From a terminal: `minipipe check exercises/09_bubble_arithmetic.ipynb`.
