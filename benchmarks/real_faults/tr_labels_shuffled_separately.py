"""Features and labels shuffled with two different permutations before the split."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    d = digits(seed, n_train=1000)
    g = torch.Generator().manual_seed(seed + 1)
    p = torch.randperm(len(d.x_train), generator=g)
    q = torch.randperm(len(d.x_train), generator=g) if bug else p
    model = mlp([64, 128, 10])
    return Script(model, Split(d.x_train[p], d.y_train[q], d.x_val, d.y_val),
                  nn.CrossEntropyLoss(), adam(model, 3e-3), steps=200)


FAULT = Fault("inputs and labels shuffled separately", "udacity/sdc-issue-reports#1326", "training",
              ("LABELS_SHUFFLED",), "training loss falls, validation accuracy stays at chance",
              below_chance, build)
