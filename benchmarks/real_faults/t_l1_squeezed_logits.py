"""Regression head squeezed to (N,) while the labels are (N, 1): L1 loss broadcasts to (N, N)."""
from torch import nn

from .harness import Fault, Script, Split, adam, regression


def build(bug: bool, seed: int) -> Script:
    d = regression(seed)
    d = Split(d.x_train, d.y_train[:, None], d.x_val, d.y_val[:, None])
    tail = [nn.Flatten(0)] if bug else []
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1), *tail)
    return Script(model, d, nn.L1Loss(), adam(model, 3e-3), steps=200, task="regression")


FAULT = Fault("squeezed predictions against (N,1) labels", "deepset-ai/FARM#229", "tensors and inputs",
              ("LOSS_SHAPE_MISMATCH",), "the loss plateaus; predictions collapse to the median",
              lambda r: r.val_score < 0.3, build)
