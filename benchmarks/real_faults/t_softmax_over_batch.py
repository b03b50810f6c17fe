"""Attention weights normalised over the batch dimension instead of the keys."""
import torch
from torch import nn

from .harness import Fault, Script, adam, sequences


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.dim = 0 if bug else 1
        self.score, self.head = nn.Linear(4, 1), nn.Linear(4, 2)

    def forward(self, x):                       # x: (batch, time, features)
        w = torch.softmax(self.score(x), dim=self.dim)
        return self.head((w * x).sum(1))


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, sequences(seed, steps=20), nn.CrossEntropyLoss(), adam(model, 1e-2),
                  steps=100)


FAULT = Fault("softmax over the batch in attention pooling", "ethanfetaya/NRI#25",
              "tensors and inputs", ("BATCH_MIXING", "SOFTMAX_WRONG_DIM"),
              "an example's prediction changes with the other examples of its batch",
              lambda r: not r.batch_consistent, build)
