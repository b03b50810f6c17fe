"""BCEWithLogitsLoss fed sigmoid outputs: a second sigmoid squashes the logits into [0.5, 0.73].

100 steps (about 6 epochs): at 150 the fixed twin overfitted its overlapping clusters on seed 3
of 0-19 (validation loss up 16% from its best while the training loss fell), which OVERFITTING
rightly reported; at 100 steps no fixed twin of seeds 0-19 has a finding and every broken
one is reproduced and diagnosed.
"""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, blobs, mlp


def build(bug: bool, seed: int) -> Script:
    d = blobs(seed, n_train=1024, spread=1.5)
    d = Split(d.x_train, d.y_train.float(), d.x_val, d.y_val.float())
    model = nn.Sequential(mlp([10, 32, 1]), nn.Flatten(0), *([nn.Sigmoid()] if bug else []))
    s = Script(model, d, nn.BCEWithLogitsLoss(), adam(model, 1e-2), steps=100)
    s.predict = (lambda x: model(x)) if bug else (lambda x: torch.sigmoid(model(x)))
    return s


FAULT = Fault("sigmoid before BCEWithLogitsLoss", "runame/laplace-redux#1 (probabilities where "
              "logits are expected); Humbatova et al.: wrong loss function input", "training",
              ("DOUBLE_SOFTMAX",), "the loss stays near 0.5 on separable data",
              lambda r: sum(r.losses[-20:]) / 20 > 0.45, build, blame="2")
