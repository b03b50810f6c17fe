"""F.dropout(x, p) without training=self.training: its default is training=True."""
import torch.nn.functional as F
from torch import nn

from .harness import Fault, Script, adam, blobs


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.fc1, self.fc2 = bug, nn.Linear(10, 64), nn.Linear(64, 4)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = F.dropout(h, p=0.3) if self.bug else F.dropout(h, p=0.3, training=self.training)
        return self.fc2(h)


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, blobs(seed, classes=4, spread=2.0), nn.CrossEntropyLoss(), adam(model))


FAULT = Fault("F.dropout without training=", "rixwew/pytorch-fm#21; pytorch/pytorch#26338", "API",
              ("TRAIN_MODE_DURING_EVAL",), "model.eval() does not turn dropout off: predictions "
              "change between two evaluations", lambda r: not r.eval_repeatable, build)
