"""Every layer of a small CNN initialised with nn.init.constant_: all filters stay one filter."""
import torch
from torch import nn

from .harness import Fault, Script, adam, digits


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(1, 8, 3, padding=1), nn.Linear(8 * 16, 10)

    def forward(self, x):
        h = torch.relu(self.conv(x.reshape(-1, 1, 8, 8)))
        return self.head(nn.functional.max_pool2d(h, 2).flatten(1))


def build(bug: bool, seed: int) -> Script:
    model = Net()
    if bug:
        for p in model.parameters():
            nn.init.constant_(p, 0.05)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 3e-3), steps=200)


FAULT = Fault("layers initialised to one constant", "jthickstun/pytorch_musicnet#4 (constant "
              "init); Humbatova et al. taxonomy: wrong weights initialisation", "model",
              ("SYMMETRIC_WEIGHTS",), "validation accuracy far below the same net's usual ~95%",
              lambda r: r.val_score < 0.92, build, blame="conv")
# 200 steps, symptom below 92%: over seeds 0-19 the broken net reaches 0.85-0.90 and the fixed
# one 0.93-0.98; at 100 steps the fixed one stopped at 0.896 on seed 6 (not reproduced)
