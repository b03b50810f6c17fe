"""SGD at lr=1e-5: after the whole run the loss has barely moved."""
from torch import nn

from .harness import Fault, Script, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 1e-5 if bug else 0.1),
                  steps=200)


FAULT = Fault("learning rate far too low", "AUTOTRAINER (Zhang et al., ICSE 2021): slow "
              "convergence; DeepFD: wrong learning rate", "training", ("LR_TOO_LOW",),
              "the training loss stays at its starting value", lambda r: r.fell < 0.05, build)
