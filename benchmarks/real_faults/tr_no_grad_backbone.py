"""torch.no_grad() around a backbone that was meant to be fine-tuned."""
import torch
from torch import nn

from .harness import Fault, Script, digits, mlp, sgd


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.backbone, self.head = bug, mlp([64, 32, 32]), nn.Linear(32, 10)

    def forward(self, x):
        with torch.set_grad_enabled(not self.bug and torch.is_grad_enabled()):
            h = torch.relu(self.backbone(x))
        return self.head(h)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 0.1, 0.9))


FAULT = Fault("no_grad around layers that should train", "xinntao in XPixelGroup/BasicSR#50 "
              "(detach/no_grad stops backpropagation to a network)", "training", ("NO_GRADIENT",),
              "the backbone's weights do not change", lambda r: not r.moved["backbone.0.weight"],
              build, blame="backbone.0")
