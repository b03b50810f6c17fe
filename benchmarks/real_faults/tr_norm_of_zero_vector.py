"""A distance written sqrt(sum((a - b)^2)) in a siamese loss: identical pairs give a NaN gradient."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, blobs, mlp


def build(bug: bool, seed: int) -> Script:
    d = blobs(seed)
    x, y = d.x_train.clone(), d.y_train.clone()
    x[1:64:2], y[1:64:2] = x[0:64:2], y[0:64:2]       # the first pairs are one sample twice
    model = mlp([10, 32, 2])

    def loss(z, t):
        gap = (z[0::2] - z[1::2]).pow(2).sum(1)
        dist = gap.sqrt() if bug else (gap + 1e-8).sqrt()
        same = (t[0::2] == t[1::2]).float()
        return nn.functional.cross_entropy(z, t) + 0.01 * (same * dist).mean()
    return Script(model, Split(x, y, d.x_val, d.y_val), loss, adam(model), steps=100,
                  shuffle=False)


FAULT = Fault("gradient of a zero Euclidean distance is NaN", "pytorch/pytorch#2421", "training",
              ("NAN_OR_INF",), "the weights turn NaN after the first step",
              lambda r: not r.finite, build)
