"""Adam at lr=1 (a value copied from an SGD recipe): the loss jumps and stays high."""
from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 128, 128, 10])
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 1.0 if bug else 1e-3))


FAULT = Fault("Adam with an SGD-sized learning rate", "AUTOTRAINER (Zhang et al., ICSE 2021): "
              "oscillating loss; DeepFD: wrong learning rate", "training",
              ("LR_TOO_HIGH", "NAN_OR_INF", "DEAD_NEURONS"), "the accuracy stays near chance",
              lambda r: below_chance(r, 0.3), build)
