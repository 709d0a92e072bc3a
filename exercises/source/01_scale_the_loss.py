# %% [markdown]
# # Exercise 01 · Scale the loss
#
# Practises lessons [00 · Start here](../lessons/00_start_here.ipynb) (the pipeline's losses equal the whole
# model's) and [01 · Why split a model](../lessons/01_why_split.ipynb) (activations grow with the batch). The
# first exercise: it needs plain PyTorch only.
#
# A pipeline never sees the whole batch at once: it runs $m$ micro-batches and lets backward **add up**
# their gradients in each parameter's `.grad`. For the optimizer to take the same step as the whole model
# would, the sum must equal the gradient of the whole batch's mean loss. The most common bug in real
# pipeline code is a loss that is not scaled for this: training still runs, the loss still falls, but the
# step is $m$ times too large, and changing $m$ changes the training.
#
# Here is the reference, the whole batch in one go, on the course MLP:

# %%
import torch

from minipipe import make_task
from minipipe.course.exercises import check_loss_scaling

task = make_task("mlp", batch_size=32, width=16, depth=3)
model = torch.nn.Sequential(*task.layers())
x, y = task.batch(0)

loss = task.loss(model(x), y)            # mean squared error: a mean over the 32 rows
loss.backward()
whole = model[0].linear.weight.grad.clone()
print(f"whole batch: loss {loss.item():.4f}, one gradient entry {whole[0, 0].item():+.6f}")
model.zero_grad(set_to_none=True)

# %% [markdown]
# ## Your task
#
# Write `accumulate(model, loss_fn, x, y, m)`: cut the batch `(x, y)` into `m` equal micro-batches
# (`x.chunk(m)`), run forward and backward on each, one after another, so that afterwards every
# parameter's `.grad` holds the gradient of the **whole batch's mean loss**. Return that mean loss as a
# number. The gradients arrive empty (`None`); do not zero them yourself.
#
# The check compares your gradients with one backward of the whole batch, for m = 1, 2, 4, 8, on the MLP
# (mean squared error) and on the tiny GPT (cross-entropy, a mean over every token). It also watches your
# function's calls: the model must run once on each micro-batch, and each micro-batch's backward must come
# right after its forward (so that only one micro-batch's activations are held at a time), bringing the
# gradient of that micro-batch's loss divided by $m$.
#
# What your code may call while the check runs it: the model and the loss it is given (the course models,
# `minipipe.models`), and plain torch; not minipipe's own stage, which divides by $m$ for you; anything else
# of minipipe's, torch's pipelining, tensor and data parallelism and FSDP, and the frameworks (DeepSpeed,
# Megatron, JAX, minipipe.frameworks) is refused, with the call named; threads and processes of its own too.
# Your own cells may use minipipe to try things.

# %%
def accumulate(model, loss_fn, x, y, m):
    ### BEGIN SOLUTION
    total = 0.0
    for xs, ys in zip(x.chunk(m), y.chunk(m)):
        loss = loss_fn(model(xs), ys) / m      # each micro-batch's mean, one m-th of the batch's
        loss.backward()                        # adds into .grad
        total += loss.item()
    return total
    ### END SOLUTION


# %% tags=["check"]
check_loss_scaling(accumulate)

# %% [markdown]
# Once it passes, find the same line in the engine: `minipipe/engine/stage.py`, where the last stage computes the
# loss of a micro-batch. What would go wrong if the micro-batches were not of equal size?
#
# From a terminal: `minipipe check exercises/01_scale_the_loss.ipynb`.
