"""Image pixels fed as 0-255 values: the first layer saturates and the loss stalls."""
from torch import nn

from .harness import Fault, Script, Split, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    raw = digits(seed, standardize=False)
    d = Split(raw.x_train * 16, raw.y_train, raw.x_val * 16, raw.y_val) if bug else digits(seed)
    model = mlp([64, 64, 10], nn.Tanh)
    return Script(model, d, nn.CrossEntropyLoss(), sgd(model, 0.05), steps=150)


FAULT = Fault("images fed unnormalised (0-255)", "hill-a/stable-baselines#328", "tensors and inputs",
              ("UNNORMALIZED_INPUTS",), "accuracy well below that of the scaled inputs",
              lambda r: r.val_score < 0.9, build)
