"""Seven sigmoid hidden layers: the gradient reaching the first layers is ~1e-4 of the last's.

The fix is the one the reports converge on: ReLU with the initialisation made for it (He et
al., 2015: kaiming_normal_, zero biases). ReLU alone on PyTorch's default init still shrinks
the signal layer by layer in a net this deep and trained to under 50% on some seeds, so a
fixed twin with ReLU only was itself a failing network. Both twins: SGD 0.02, momentum 0.9.
"""
from torch import nn

from .harness import Fault, Script, below_chance, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    model = mlp([64] + [64] * 7 + [10], nn.Sigmoid if bug else nn.ReLU)
    if not bug:
        for layer in model:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 0.02, 0.9), steps=150)


FAULT = Fault("deep sigmoid stack does not train", "microsoft/CNTK#476; AUTOTRAINER (Zhang et al., "
              "ICSE 2021): vanishing gradient", "model", ("VANISHING_GRADIENT",),
              "the training error does not descend at all", below_chance, build, blame="0")
