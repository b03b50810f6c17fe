"""Per-sample min-max scaling (x - min) / (max - min): a constant sample divides 0 by 0."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, digits, mlp


def scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    return (x - lo) / (hi - lo + eps)


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.eps, self.body = 0.0 if bug else 1e-6, mlp([64, 64, 10])

    def forward(self, x):
        return self.body(scale(x, self.eps))


def build(bug: bool, seed: int) -> Script:
    d = digits(seed)
    x, y = d.x_train.clone(), d.y_train.clone()
    x[::97], y[::97] = 0.0, 0                      # blank scans, filed as class 0
    model = Net(bug)
    return Script(model, Split(x, y, d.x_val, d.y_val), nn.CrossEntropyLoss(),
                  adam(model), steps=100)


FAULT = Fault("min-max normalisation of a constant image", "avalonstrel/GatedConvolution_pytorch#27",
              "tensors and inputs", ("DIVISION_BY_ZERO", "NAN_OR_INF"),
              "gan and other losses are NaN", lambda r: not r.finite, build)
