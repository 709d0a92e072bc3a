# %% [markdown]
# # Exercise 04 · Fix a deadlock
#
# Practises lessons [04 · 1F1B](../lessons/04_one_f_one_b.ipynb) and
# [02 · Naive model parallelism](../lessons/02_naive_model_parallelism.ipynb) (what waits for what).
#
# Someone wrote 1F1B by hand for p = 3 ranks and m = 4 micro-batches. On real processes it would hang
# forever: each of two ranks waits for something the other will only send later. minipipe never starts
# processes for it: the validator replays the lists first, finds the cycle of waits, and marks it.

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
# Make `fixed()` return the schedule, repaired, as text in the same form as `BROKEN` (one line per rank).
# Change only the order of actions within a rank's line: every action must still run once, on its rank.
#
# The check proves your fix runs (and shows the marked grid if it does not, without starting any process),
# checks that it idles no more than a pipeline must — $(m + p - 1)(f + b)$ — and then trains with it on
# 3 real processes.

# %%
def fixed():
    ### BEGIN SOLUTION
    # ranks 0 and 1 had each other's warm-up: in 1F1B rank r runs p − r forwards before its first backward
    return """
    rank 0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3
    rank 1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3
    rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3
    """
    ### END SOLUTION


# %% tags=["check"]
check_deadlock_fixed(fixed)

# %% [markdown]
# Once it passes: is yours the only fix? Try moving one action, validate, and simulate it: which orders
# run, and which of those are as fast as 1F1B?
#
# From a terminal: `minipipe check exercises/04_fix_a_deadlock.ipynb`.
