"""SGD at lr=5 on a small CNN: the loss explodes to NaN within a few steps."""
import torch
from torch import nn

from .harness import Fault, Script, digits, sgd


def cnn() -> nn.Module:
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 36, 10))


def build(bug: bool, seed: int) -> Script:
    model = cnn()
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 5.0 if bug else 0.05))


FAULT = Fault("learning rate far too high (SGD)", "DeepFD benchmark (Cao et al., ICSE 2022): "
              "wrong learning rate; CANDY-HOUSE2002 in abduallahmohamed/Social-STGCNN#20",
              "training", ("LR_TOO_HIGH", "NAN_OR_INF", "EXPLODING_GRADIENT"),
              "the loss becomes NaN after a few iterations",
              lambda r: not r.finite or r.val_score < 0.5, build)
