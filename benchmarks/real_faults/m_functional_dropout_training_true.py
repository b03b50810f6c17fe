"""F.dropout2d(..., training=True) in forward: dropout stays on after model.eval()."""
import torch.nn.functional as F
from torch import nn

from .harness import Fault, Script, adam, digits


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.conv, self.head = bug, nn.Conv2d(1, 16, 3, padding=1), nn.Linear(16, 10)

    def forward(self, x):
        h = F.relu(self.conv(x.reshape(-1, 1, 8, 8)))
        h = F.max_pool2d(h, kernel_size=h.shape[2:]).flatten(1)
        h = F.dropout(h, 0.2, training=True if self.bug else self.training)
        return self.head(h)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 1e-2), steps=120)


FAULT = Fault("functional dropout with training=True", "Coderx7/SimpleNet#2", "API",
              ("TRAIN_MODE_DURING_EVAL",), "the same example gives a different output on every "
              "evaluation run", lambda r: not r.eval_repeatable, build)
