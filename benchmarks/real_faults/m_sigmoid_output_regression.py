"""Sigmoid on a regression output whose targets range up to ~6: the fit saturates at 1."""
from torch import nn

from .harness import Fault, Script, Split, adam, regression


def build(bug: bool, seed: int) -> Script:
    d = regression(seed)
    d = Split(d.x_train, 2 * d.y_train + 3, d.x_val, 2 * d.y_val + 3)
    head = [nn.Sigmoid()] if bug else []
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1), *head, nn.Flatten(0))
    return Script(model, d, nn.MSELoss(), adam(model, 1e-2), steps=200, task="regression")


FAULT = Fault("sigmoid on an unbounded regression output", "luoyetx/deep-landmark#17 (activation "
              "on the final regression layer); Humbatova et al.: wrong activation function",
              "model", ("OUTPUT_RANGE_MISMATCH",), "the loss plateaus high; R^2 below 0",
              lambda r: r.val_score < 0.5, build, blame="3")
