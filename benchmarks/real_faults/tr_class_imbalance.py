"""A 30:1 imbalanced training set trained with a plain loss: the minority class is never predicted."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, blobs, mlp


def build(bug: bool, seed: int) -> Script:
    d = blobs(seed, n_train=2000, spread=2.5)
    keep = torch.ones(len(d.y_train), dtype=torch.bool)
    if bug:
        ones = torch.nonzero(d.y_train == 1).flatten()
        keep[ones[len(ones) // 30:]] = False
    model = mlp([10, 32, 2])
    return Script(model, Split(d.x_train[keep], d.y_train[keep], d.x_val, d.y_val),
                  nn.CrossEntropyLoss(), adam(model, 1e-3), steps=150)


FAULT = Fault("heavily imbalanced classes", "AUTOTRAINER / DeepFD: training data quality; "
              "Humbatova et al.: unbalanced training data", "training", ("CLASS_IMBALANCE",),
              "the minority class is mostly missed",
              lambda r: bool(r.script.data.y_train.float().mean() < 0.05), build)
