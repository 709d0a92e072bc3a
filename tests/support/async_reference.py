"""The one-process reference of the asynchronous update rules, written from the papers alone.

No minipipe executor, schedule or version plan here: the model's layers cut into the run's stages,
then every micro-batch in order, each stage's forward with the weight version the paper's formula
gives, and the updates the paper's equation makes:

    pipedream      (Narayanan et al., SOSP 2019, §3.3) stage i of n (1-indexed) computes micro-batch t's
                   gradient with w_i^(t−n+i) and every stage updates after every micro-batch:
                   w^(t+1) = w^(t) − ν·∇f(w_1^(t−n+1), w_2^(t−n+2), ..., w_n^(t)); before the pipeline
                   is full the stage has only its first weights, version 0.
    2bw            (Narayanan et al., ICML 2021, §3.1) micro-batch k (1-indexed) uses version
                   max(⌊(k−1)/m⌋ − 1, 0) on every stage; a step's m gradients are summed and applied once:
                   W^(t+1) = W^(t) − ν·∇f(W^(t−1)).

"−ν·∇f" stands for the run's optimizer (Adam or SGD) stepping the newest weights with that gradient,
as the papers' implementations do. Every weight version is kept (a list per stage), so nothing
here can mix one version up with another.
"""

import torch
from torch import nn
from torch.func import functional_call

from minipipe.models import task_of


def version_used(rule: str, stage: int, n_stages: int, mb: int, m: int) -> int:
    if rule == "pipedream":
        return max(0, mb - (n_stages - 1 - stage))  # w_i^(t−n+i), i = stage + 1, t = mb
    return max(mb // m - 1, 0)  # max(⌊(k−1)/m⌋ − 1, 0), k = mb + 1


def reference_run(config, rule: str, stage_layers: list[list[int]]):
    """Per-step mean losses and the final weights (named as nn.Sequential(*task.layers())), computed
    on one thread as each rank computes (config.threads): a matrix product split over two threads
    sums in another order, a last-bit difference that Adam makes visible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _reference_run(config, rule, stage_layers)
    finally:
        torch.set_num_threads(threads)


def _reference_run(config, rule: str, stage_layers: list[list[int]]):
    task, m, steps = task_of(config), config.m, config.steps
    layers = task.layers()
    stages = [nn.Sequential(*[layers[i] for i in idx]) for idx in stage_layers]
    names = [[name for name, _ in st.named_parameters()] for st in stages]
    history = [[{name: p.detach().clone() for name, p in st.named_parameters()}] for st in stages]
    make = torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD
    optimizers = [make(st.parameters(), lr=config.lr) for st in stages]
    per_update = 1 if rule == "pipedream" else m  # each loss divided by the micro-batches of one update
    sums, step_losses, losses = [None] * len(stages), [], []
    for mb in range(steps * m):
        step, piece = divmod(mb, m)
        x, y = (t.chunk(m)[piece] for t in task.batch(step))
        used = [
            {
                name: t.clone().requires_grad_()
                for name, t in history[s][version_used(rule, s, len(stages), mb, m)].items()
            }
            for s in range(len(stages))
        ]
        h = x
        for st, weights in zip(stages, used):
            h = functional_call(st, weights, (h,))
        loss = task.loss(h, y) / per_update
        loss.backward()
        step_losses.append(loss.detach())
        for s, weights in enumerate(used):
            grads = [weights[name].grad for name in names[s]]
            sums[s] = grads if sums[s] is None else [a + b for a, b in zip(sums[s], grads)]
        if rule == "pipedream" or piece == m - 1:  # the update is whole: every stage steps its newest
            for s, st in enumerate(stages):
                for p, g in zip(st.parameters(), sums[s]):
                    p.grad = g
                optimizers[s].step()
                history[s].append({name: p.detach().clone() for name, p in st.named_parameters()})
                sums[s] = None
        if piece == m - 1:
            losses.append((torch.stack(step_losses).sum() * (per_update / m)).item())
            step_losses = []
    state = {}
    for idx, st in zip(stage_layers, stages):
        for name, t in st.state_dict().items():
            local, rest = name.split(".", 1)
            state[f"{idx[int(local)]}.{rest}"] = t.detach().clone()
    return losses, state
