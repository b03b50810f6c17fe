"""F.nll_loss(F.log_softmax(F.softmax(logits))): a second softmax inside a hand-written loss."""
import torch.nn.functional as F
from torch import nn

from .harness import Fault, Script, adam, blobs


class LogReg(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.linear = bug, nn.Linear(10, 5)

    def forward(self, x):
        z = self.linear(x)
        return F.softmax(z, dim=-1) if self.bug else z


def loss(out, y):
    return F.nll_loss(F.log_softmax(out, dim=-1), y)


def build(bug: bool, seed: int) -> Script:
    model = LogReg(bug)
    return Script(model, blobs(seed, classes=5, spread=1.5), loss, adam(model, 1e-2), steps=150)


FAULT = Fault("softmax applied twice in LogisticRegression", "Lightning-Universe/lightning-bolts#654",
              "training", ("DOUBLE_SOFTMAX",), "the loss stays above 1 on separable data",
              lambda r: min(r.losses) > 0.85, build)
