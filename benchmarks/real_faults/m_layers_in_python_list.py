"""Hidden layers kept in a plain Python list: model.parameters() misses them; they never train."""
import torch
from torch import nn

from .harness import Fault, Script, adam, digits


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        blocks = [nn.Linear(64, 64), nn.Linear(64, 64)]
        self.blocks = blocks if bug else nn.ModuleList(blocks)
        self.head = nn.Linear(64, 10)
        self.start = blocks[0].weight.detach().clone()

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 3e-3))


FAULT = Fault("sub-layers in a Python list", "pytorch/pytorch#715", "API",
              ("PARAMS_NOT_UPDATED",), "the listed layers' weights are unchanged after training",
              lambda r: torch.equal(r.script.model.blocks[0].weight, r.script.model.start), build)
