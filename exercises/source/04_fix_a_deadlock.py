# %% [markdown]
# # Exercise 04 · Fix a deadlock
#
# Practises lessons [04 · 1F1B](../lessons/04_one_f_one_b.ipynb) and
# [02 · Naive model parallelism](../lessons/02_naive_model_parallelism.ipynb) (what waits for what). Do
# exercises [02](02_write_gpipe.ipynb) and [03](03_one_f_one_b.ipynb) first.
#
# Someone wrote a schedule by hand for p = 3 ranks and m = 4 micro-batches: 1F1B's order on ranks 0 and 2,
# GPipe's on rank 1. On real processes it would hang forever: each of two ranks waits for something the other
# will only send later. minipipe never starts processes for it: the validator replays the lists first, finds
# the cycle of waits, and marks it.

# %%
from minipipe import Schedule, simulate
from minipipe.course.exercises import check_deadlock_fixed
from minipipe.course.exercises.deadlock import BROKEN
from minipipe.schedule.validate import ScheduleError, validate

print(BROKEN)
try:
    validate(Schedule.from_text(BROKEN))
except ScheduleError as error:
    print(error)

# %% [markdown]
# Read the error: which rank waits for which action, and which action of the other rank comes first?
#
# ## Your task
#
# Make `fixed()` return the schedule, repaired, as text in the same form as `BROKEN` (one line per rank), or
# as one list of actions per rank. Repair it the way one repairs code: change as little as you can. **Move one
# action** to another place in its rank's line; every action still runs once, on its rank.
#
# The check proves your fix runs (and shows the marked grid if it does not, without starting any process),
# counts the actions you moved, checks that it idles no more than a pipeline must — $(m + p - 1)(f + b)$ — and
# then trains with it on 3 real processes. There are two single moves that end the deadlock; only one of them
# wastes no time. (A schedule of the engine's, GPipe's or 1F1B's, is more than one move away.)
#
# What your code may call while the check runs it: the actions (`F`, `B` from `minipipe.schedule.ops`),
# `Schedule` (`Schedule.from_text`, `to_text`), `validate` and `simulate`, and plain Python; not the
# engine's schedules (`make_schedule`); anything else of minipipe's, torch's pipelining, tensor and data
# parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with
# the call named; threads and processes of its own too. Your own cells may use minipipe to try things.

# %%
def fixed():
    ### BEGIN SOLUTION
    # 0B0 waits for 1B0, which rank 1 runs only after all its forwards, 1F3 among them, which waits for 0F3:
    # rank 0 runs 0F3 before 0B0. (Moving 1B0 before 1F3 ends the deadlock too, but rank 0 then idles.)
    return """
    rank 0: 0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3
    rank 1: 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3
    rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3
    """
    ### END SOLUTION


# %% tags=["check"]
check_deadlock_fixed(fixed)

# %% [markdown]
# Once it passes: try the other single move, validate it and simulate it. Where does a rank wait, and why?
# How much memory does each fix hold on each rank (`simulate(...).peak_inflight()`)?
#
# From a terminal: `minipipe check exercises/04_fix_a_deadlock.ipynb`.
