"""Pixels standardised with (x - mean) / std over the training set: a pixel that is always 0 gives
0 / 0 = NaN in every row. The fix gives each pixel a scale of at least one grey level, as
`digits()` does (a floor at 1e-6 would still blow up a pixel that is almost always 0)."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    raw = digits(seed, standardize=False)
    mean, std = raw.x_train.mean(0), raw.x_train.std(0)
    if not bug:
        std = std.clamp_min(1.0)
    d = Split((raw.x_train - mean) / std, raw.y_train, (raw.x_val - mean) / std, raw.y_val)
    model = mlp([64, 64, 10])
    return Script(model, d, nn.CrossEntropyLoss(), adam(model), steps=100)


FAULT = Fault("standardising a constant feature", "pytorch/pytorch#4320 (std of a constant); "
              "tangeroo in avalonstrel/GatedConvolution_pytorch#27", "tensors and inputs",
              ("NONFINITE_INPUT", "DIVISION_BY_ZERO", "NAN_OR_INF"), "loss is NaN from step 0",
              lambda r: not r.finite, build)
