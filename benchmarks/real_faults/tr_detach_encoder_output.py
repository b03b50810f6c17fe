"""An encoder's features detached before the classifier head: the encoder never learns."""
from torch import nn

from .harness import Fault, Script, adam, digits, mlp


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.encoder, self.head = bug, mlp([64, 64, 32]), nn.Linear(32, 10)

    def forward(self, x):
        h = self.encoder(x).relu()
        return self.head(h.detach() if self.bug else h)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 3e-3))


FAULT = Fault(".detach() on features in forward", "fariasfc in vturrisi/solo-learn#135 "
              "(is the encoder learning after feats.detach()?)", "training", ("NO_GRADIENT",),
              "the encoder's weights do not change",
              lambda r: not r.moved["encoder.0.weight"], build, blame="encoder.0")
