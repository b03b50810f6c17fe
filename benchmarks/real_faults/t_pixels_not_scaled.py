"""Image pixels fed as 0-255 values: the first layer saturates and the loss stalls. The fix, as
in the report, scales the pixels to [0, 1]."""
from torch import nn

from .harness import Fault, Script, Split, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    raw = digits(seed, standardize=False)                     # pixel levels 0-16
    scale = 16.0 if bug else 1.0 / 16.0                       # 0-255 against 0-1
    d = Split(raw.x_train * scale, raw.y_train, raw.x_val * scale, raw.y_val)
    model = mlp([64, 64, 10], nn.Tanh)
    return Script(model, d, nn.CrossEntropyLoss(), sgd(model, 0.3), steps=150)


FAULT = Fault("images fed unnormalised (0-255)", "hill-a/stable-baselines#328", "tensors and inputs",
              ("UNNORMALIZED_INPUTS",), "accuracy well below that of the scaled inputs",
              lambda r: r.val_score < 0.9, build)
