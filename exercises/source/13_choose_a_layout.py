# %% [markdown]
# # Exercise 13 · Choose a layout
#
# Practises lessons [12 · Choosing a split](../lessons/12_choosing_a_split.ipynb) and
# [14 · Planning at the scale of published runs](../lessons/14_planning.ipynb).
#
# A real training run splits $N$ GPUs three ways: tensor parallelism (tp) inside a node, pipeline stages (pp),
# and data-parallel replicas (dp), with $tp \cdot pp \cdot dp = N$. Then it chooses the micro-batch size, how
# many micro-batches $m$ each pipeline runs per step (so that $dp \cdot \text{micro-batch} \cdot m$ is the global
# batch), the schedule, whether to recompute activations in the backward instead of keeping them, and whether
# to shard Adam's state over the data-parallel replicas (ZeRO stage 1, `zero=1`).
#
# minipipe's planner predicts, for any such layout, the memory on each GPU and the step time, from the
# formulas of the course. `evaluate` is its cost model for one layout:

# %%
from minipipe.course.exercises import check_layout
from minipipe.planner import Layout, evaluate, make_setup

setup = make_setup("llama2-7b", gpus=64, gpu="a100-80gb")
print(f"{setup.model.name}: {setup.model.layers} layers, global batch {setup.batch} sequences of {setup.model.seq} "
      f"tokens; {setup.gpus} × {setup.gpu.name}, {setup.node} per node")
row = evaluate(setup, Layout(tp=8, pp=1, dp=8, micro_batch=1, m=128))
print(f"tp8 pp1 dp8: {row.step:.2f} s per step, {row.total_memory / 2**30:.1f} GiB of the "
      f"{row.usable / 2**30:.1f} GiB usable (a GPU's {row.capacity / 2**30:.1f} less a reserve), fits: {row.fits}")

# %% [markdown]
# ## Your task
#
# Write `choose(model, gpus, gpu)`: a `Layout` for that model on that cluster that fits in memory and whose
# predicted step time is within 10 % of the best the planner finds among the same choices. The check asks it
# for Llama 2 7B on 64 A100s, GPT-3 175B on 1024 A100s, Llama 2 70B on 256 H100s, and for two clusters it does
# not name here: your function has to choose, not look an answer up.
#
# Reason first: which split does each need to fit (16 bytes of model state per parameter with Adam), where
# does tensor parallelism stop paying (a node has 8 GPUs), how large must $m$ be for a small bubble? Then try
# your candidates with `evaluate`. The choices:
# `schedule` "1f1b" or "interleaved" (with `v` chunks per rank, $m$ a multiple of pp), `recompute` "none",
# "selective" or "full", `zero` 0 or 1. A layout must fit in 90 % of a GPU's memory: the planner keeps 10 %
# free for what it does not count (`row.usable`).
#
# What your code may call while the check runs it: the planner's cost model for one layout (`evaluate`, its
# `Row`), `make_setup`, `Layout`, `Setup`, the planner's presets and `ModelShape`; not the planner's search
# (`plan`, `layouts`); anything else of minipipe's, torch's pipelining, tensor and data parallelism and
# FSDP, and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with the call named;
# threads and processes of its own too. Your own cells may use minipipe to try things.

# %%
def choose(model, gpus, gpu):
    ### BEGIN SOLUTION
    setup = make_setup(model, gpus, gpu)
    layers, best = setup.model.layers, None

    def divisors(n):
        return [d for d in range(1, n + 1) if n % d == 0]

    for tp in (t for t in divisors(gpus) if t <= setup.node):    # inside a node
        for pp in (d for d in divisors(gpus // tp) if d <= layers):
            dp = gpus // (tp * pp)
            if setup.batch % dp:
                continue
            for b in (d for d in divisors(setup.batch // dp) if d <= 8):
                m = setup.batch // (dp * b)
                kinds = [("1f1b", 1)] + [("interleaved", v) for v in range(2, 9)
                                         if pp > 1 and m % pp == 0 and pp * v <= layers]
                for schedule, v in kinds:
                    for recompute in ("none", "selective", "full"):
                        for zero in (0, 1):
                            try:
                                row = evaluate(setup, Layout(tp, pp, dp, b, m, schedule, v, recompute, zero))
                            except ValueError:                # a layout the planner refuses, e.g. tp
                                continue                      # not dividing the heads
                            if row.fits and (best is None or row.step < best.step):
                                best = row
    return best.layout
    ### END SOLUTION


# %% tags=["check"]
check_layout(choose)

# %% [markdown]
# Once it passes, compare your choices with the planner's ranking: `from minipipe.planner import plan`, then
# `print(plan("gpt3-175b", 1024, "a100-80gb").table())`. Which published runs chose what, and why
# (lesson 14)?
#
# From a terminal: `minipipe check exercises/13_choose_a_layout.ipynb`.
