"""A feature transform done in NumPy inside forward: the graph is cut, the first layer never trains."""
import numpy as np
import torch
from torch import nn

from .harness import Fault, Script, adam, blobs


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.fc1, self.fc2 = bug, nn.Linear(10, 32), nn.Linear(32, 3)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.from_numpy(np.tanh(h.detach().numpy())) if self.bug else torch.tanh(h)
        return self.fc2(h)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, blobs(seed, classes=3), nn.CrossEntropyLoss(), adam(model, 3e-3))


FAULT = Fault("NumPy call inside forward", "pytorch/pytorch discussion cited in Humbatova et al.: "
              "tensor converted to NumPy breaks autograd; DeepDiagnosis benchmark", "API",
              ("NO_GRADIENT",), "fc1's weights never change", lambda r: not r.moved["fc1.weight"],
              build, blame="fc1")
