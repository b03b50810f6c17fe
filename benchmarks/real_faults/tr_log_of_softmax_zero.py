"""Binary cross-entropy written by hand: once sigmoid(z) rounds to 1.0, log(1 - p) = log(0)."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, blobs, mlp, standardised


def build(bug: bool, seed: int) -> Script:
    d = standardised(blobs(seed, spread=0.5))
    d = Split(d.x_train, d.y_train.float(), d.x_val, d.y_val.float())

    def loss(z, y):
        if bug:
            p = torch.sigmoid(z)
            return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
        return nn.functional.binary_cross_entropy_with_logits(z, y)
    model = nn.Sequential(mlp([10, 32, 1]), nn.Flatten(0))
    s = Script(model, d, loss, adam(model, 0.05), steps=200)
    s.predict = lambda x: torch.sigmoid(model(x))
    return s


FAULT = Fault("log of a probability that rounds to 0", "bhanML/Co-teaching#4 (log of softmax "
              "outputs); DeepFD / defects4ML: NaN from the loss", "training",
              ("LOG_OF_ZERO", "NAN_OR_INF"), "the loss becomes NaN once the model is confident",
              lambda r: not r.finite, build)
