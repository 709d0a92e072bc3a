"""A model in a module of its own, for `RunConfig(model="tests.support.own_model:make")`: a factory function
(not a class) whose object is no nn.Module, classifying points by the quadrant they lie in."""

from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F


def make(batch_size: int, seed: int, width: int = 16, depth: int = 3):
    def layers():
        hidden = [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]
        return [nn.Linear(2, width), *hidden, nn.Linear(width, 4)]

    def batch(step):
        x = torch.randn(batch_size, 2)  # seeded by the pipeline from (seed, step)
        return x, (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()

    return SimpleNamespace(layers=layers, loss=F.cross_entropy, batch=batch)
