# %% [markdown]
# # Exercise 14 · Serve a stream, generate token by token
#
# Practises lesson [08 · Serving and generation](../lessons/08_serving_and_generation.ipynb) (one request
# walks every stage; a stream keeps the stages busy; generation feeds each token back). It needs no other
# exercise, only the actions `F(stage, mb)` of [exercise 02](02_write_gpipe.ipynb); do it after
# [exercise 09](09_bubble_arithmetic.ipynb), the other exercise that works out times by hand.
#
# Serving runs the trained stages **forward only**: no loss, no backward, no optimizer. A micro-batch of $k$
# requests walks stage 0, then stage 1, ..., and each stage hands it on to the next rank (a message that costs
# `latency` ms). Here is the engine's forward-only schedule of a stream, and a stream on its cost model:

# %%
from minipipe import make_schedule
from minipipe.course.exercises import check_serving
from minipipe.schedule.ops import F
from minipipe.sim.request_stream import ServeCosts, Stream, simulate_serving

print(make_schedule("inference", p=3, m=4))
stream = Stream(requests=8, microbatch=2, rate=1000)        # one request every ms, micro-batches of k = 2
print("arrivals (ms):", stream.arrival_ms())
served = simulate_serving(stream, ServeCosts(per_request=0.5, fixed=1.0, latency=0.1), p=2)
print("results (ms): ", [round(t, 3) for t in served.done_ms])
print(served.summary())

# %% [markdown]
# ## Your task
#
# **1. Generation's rounds.** Greedy generation sends each micro-batch of sequences through the pipeline once per
# new token. The last stage picks each sequence's next token and sends it back to stage 0, which appends it and
# starts that micro-batch's next round. Write `generation_order(p, per_round, rounds)`: one list of actions per
# rank (rank r runs stage r), for `per_round` micro-batches generating `rounds` tokens. Micro-batch j of round t
# is numbered `t * per_round + j`. The check runs the validator with every fed-back token as a dependency (so an
# order that would wait forever shows its grid), then times your rounds: with every stage's forward 1 unit,
# they must be as fast as rounds with all of a round's micro-batches in flight.
#
# **2. When each request is done.** Write `done_times(arrival_ms, k, stage_ms, latency)`: for requests arriving at
# `arrival_ms` (ms, in order), cut into micro-batches of `k` (requests 0..k−1 make micro-batch 0, and so on; the
# last may hold fewer and costs as much), through `len(stage_ms)` stages of which stage s takes `stage_ms[s]`
# ms for one micro-batch, each on its own rank, and a message between ranks taking `latency` ms: when does each
# request's result leave the last stage? Return one time per request, in ms from the stream's start. (A
# micro-batch can enter stage 0 once its last request has arrived and stage 0 is free; a stage works on one
# micro-batch at a time, in order.) A request's latency is then its done time less its arrival.
#
# **3. Peak throughput.** Write `peak_throughput(k, stage_ms)`: requests per second the pipeline serves when the
# requests never run out.
#
# The check compares 2 and 3 with the engine's serving simulator on streams and pipelines drawn afresh each time
# (uneven stages, even and random arrivals, messages free and not). Compute from the arguments.
#
# What your code may call while the check runs it: the actions (`F` from `minipipe.schedule.ops`) and plain
# Python; not minipipe's schedules, simulators, `Stream` or serving model; anything else of minipipe's,
# torch's pipelining, tensor and data parallelism and FSDP, and the frameworks (DeepSpeed, Megatron, JAX,
# minipipe.frameworks) is refused, with the call named; threads and processes of its own too. Your own cells
# may use minipipe to try things.

# %%
def generation_order(p, per_round, rounds):
    ### BEGIN SOLUTION
    # every rank takes the rounds in order, and a round's micro-batches in order: while the last stage picks
    # micro-batch 0's token, stage 0 already runs micro-batch 1
    return [[F(r, t * per_round + j) for t in range(rounds) for j in range(per_round)] for r in range(p)]
    ### END SOLUTION


def done_times(arrival_ms, k, stage_ms, latency):
    ### BEGIN SOLUTION
    n = len(arrival_ms)
    ready = [arrival_ms[min((j + 1) * k, n) - 1] for j in range(-(-n // k))]   # each micro-batch's last arrival
    free, done = [0.0] * len(stage_ms), []          # when each stage is free again
    for t in ready:
        for s, cost in enumerate(stage_ms):
            t = max(t + (latency if s else 0.0), free[s]) + cost      # its input has arrived, and the stage is free
            free[s] = t
        done.append(t)
    return [done[i // k] for i in range(n)]
    ### END SOLUTION


def peak_throughput(k, stage_ms):
    ### BEGIN SOLUTION
    return 1000 * k / max(stage_ms)     # the slowest stage passes one micro-batch of k requests per its time
    ### END SOLUTION


# %% tags=["check"]
check_serving(generation_order, done_times, peak_throughput)

# %% [markdown]
# Once it passes: with `stage_ms = [1, 1]` and `latency = 0.1`, what is one request's latency alone, and does a
# pipeline of two stages answer it faster than one process running both (2 ms)? What does the second stage buy
# instead? Then lower `k` in `peak_throughput` and think about what happens when each stage also has a fixed
# cost per call (`ServeCosts.fixed`), as lesson 08 measured.
#
# From a terminal: `minipipe check exercises/14_serve_and_generate.ipynb`.
