# %% [markdown]
# # Exercise 06 · Pass the baton
#
# Practises lesson [02 · Naive model parallelism](../lessons/02_naive_model_parallelism.ipynb) (activations
# handed on like a baton) and [exercise 01](01_scale_the_loss.ipynb) (the loss scaled by $1/m$).
#
# So far the engine ran every stage for you. Here you write what one stage does with one micro-batch, inside
# the real worker processes: **receive, compute, send**, forward and backward. Your function is called for
# every forward (`F`) and backward (`B`) of every stage on every rank, in place of the engine's own:
#
# ```python
# stage_step(stage, baton)
# ```
#
# - `baton.op` is `"F"` or `"B"`, `baton.mb` the micro-batch;
# - `baton.receive()` gives what this action needs from the neighbouring stage: in a forward, the previous
#   stage's output; in a backward, the gradient of this stage's output, from the next stage. The first stage's
#   forward reads `baton.inputs` instead, and the last stage's backward starts from its loss;
# - `baton.send(tensor)` hands the result on: in a forward, this stage's output to the next stage (on the last
#   stage: the micro-batch's loss, which the trainer reports); in a backward, the gradient of this stage's
#   input to the previous stage (the first stage has no one to send it to);
# - `stage.module` is this stage's layers, `stage.loss_fn(output, target)` the loss (the last stage's
#   targets are `baton.target`), `stage.m` the number of micro-batches, `stage.is_first` and `stage.is_last`
#   say where it sits, and `stage.saved` is a dict for what a forward keeps for its backward (empty again at
#   the end of each step).
#
# Two things from autograd: a tensor that arrives from another process has no history, so `x.grad` is filled
# by the backward only if `x` was made a leaf that requires grad (`x.requires_grad_()`) before the forward;
# and `out.backward(g)` runs the backward from `out`, given the gradient `g` of whatever `out` fed into.

# %%
from minipipe import RunConfig, run
from minipipe.course.exercises import check_stage_step

# %% [markdown]
# ## Your task
#
# Write `stage_step(stage, baton)`. The check runs it first in this process (every stage here, messages in a
# dict; errors show at once), under GPipe and 1F1B, and compares the gradients with the whole model's on one
# batch. Then it runs your function inside 2 real worker processes under 1F1B and checks the losses and the
# gradients again.
#
# What your code may call while the check runs it: the baton and its actions, the stage's layers and loss
# (the course models), and plain torch; not the engine's own stage forward and backward (`Stage.forward`,
# `Stage.backward`); anything else of minipipe's, torch's pipelining, tensor and data parallelism and FSDP,
# and the frameworks (DeepSpeed, Megatron, JAX, minipipe.frameworks) is refused, with the call named;
# threads and processes of its own too. Your own cells may use minipipe to try things.

# %%
def stage_step(stage, baton):
    ### BEGIN SOLUTION
    if baton.op == "F":
        x = baton.inputs if stage.is_first else baton.receive().requires_grad_()   # a leaf: backward fills x.grad
        out = stage.module(x)
        if stage.is_last:
            out = stage.loss_fn(out, baton.target) / stage.m     # each micro-batch's share of the batch's mean
        stage.saved[baton.mb] = (x, out)                         # kept until this micro-batch's backward
        baton.send(out)
    else:
        x, out = stage.saved.pop(baton.mb)                       # and freed by it
        out.backward(None if stage.is_last else baton.receive())
        if not stage.is_first:
            baton.send(x.grad)
    ### END SOLUTION


# %% tags=["check"]
check_stage_step(stage_step)

# %% [markdown]
# Once it passes, your function trains any schedule whose backwards are whole:
# `run(RunConfig(schedule="interleaved", p=2, m=4, stage_step=stage_step)).losses`. Compare with
# `minipipe/engine/stage.py`: what does the engine's own forward do that yours does not?
#
# From a terminal: `minipipe check exercises/06_pass_the_baton.ipynb`.
