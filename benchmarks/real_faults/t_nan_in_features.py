"""Missing values read as NaN in a few training rows: the loss is NaN from the first batch that
holds one, and every weight after it."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, blobs, mlp


def build(bug: bool, seed: int) -> Script:
    d = blobs(seed)
    x = d.x_train.clone()
    if bug:
        x[torch.arange(5, len(x), 40), 3] = float("nan")
    model = mlp([10, 32, 2])
    return Script(model, Split(x, d.y_train, d.x_val, d.y_val), nn.CrossEntropyLoss(),
                  adam(model))


FAULT = Fault("NaN values in the input data", "prs-eth/Marigold#111", "tensors and inputs",
              ("NONFINITE_INPUT", "NAN_OR_INF"), "loss=nan during training",
              lambda r: not r.finite, build)
