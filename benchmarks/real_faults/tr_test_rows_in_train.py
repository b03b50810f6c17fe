"""Augmented copies made before the split: near-duplicates of test rows land in training."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    d = digits(seed, n_train=600, n_val=300)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.cat([d.x_train, d.x_val]), torch.cat([d.y_train, d.y_val])
    if bug:            # augment (small noise), then split the augmented pool at random
        x = torch.cat([x, x + 0.01 * torch.randn(x.shape, generator=g)])
        y = torch.cat([y, y])
    p = torch.randperm(len(x), generator=g)
    cut = len(x) * 2 // 3
    tr, va = p[:cut], p[cut:]
    model = mlp([64, 128, 10])
    return Script(model, Split(x[tr], y[tr], x[va], y[va]), nn.CrossEntropyLoss(),
                  adam(model, 3e-3), steps=150)


FAULT = Fault("test samples leaked into training", "Humbatova et al. taxonomy: training data "
              "quality; keras-team/keras#8346 (split after preprocessing)", "training",
              ("DUPLICATES_ACROSS_SPLITS",), "about half the validation rows have a copy in "
              "training (the score is inflated)",
              lambda r: bool(((r.script.data.x_val[:, None] - r.script.data.x_train[None])
                              .abs().amax(-1) < 0.1).any(1).float().mean() > 0.2), build)
