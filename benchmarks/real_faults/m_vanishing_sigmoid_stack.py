"""Seven sigmoid hidden layers: the gradient reaching the first layers is ~1e-4 of the last's."""
from torch import nn

from .harness import Fault, Script, below_chance, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    act = nn.Sigmoid if bug else nn.ReLU
    model = mlp([64] + [64] * 7 + [10], act)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 0.1, 0.9), steps=150)


FAULT = Fault("deep sigmoid stack does not train", "microsoft/CNTK#476; AUTOTRAINER (Zhang et al., "
              "ICSE 2021): vanishing gradient", "model", ("VANISHING_GRADIENT",),
              "the training error does not descend at all", below_chance, build, blame="0")
