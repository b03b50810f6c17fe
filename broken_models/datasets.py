"""Small data sets and helpers the case pages share: made in code, nothing downloaded.

`digits` is scikit-learn's 8x8 handwritten digits (it ships with the package): real data for the
cases where real data teaches better. The rest are synthetic and tiny, so a case trains in well
under a second on a CPU.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np
import torch
from torch import nn


class Split(NamedTuple):
    """A training split and a validation split."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data.astype(np.float32), data.target.astype(np.int64)


def digits(seed: int, n_train: int = 1000, n_val: int = 500, standardize: bool = True,
           min_scale: float = 1.0) -> Split:
    """The digits (64 pixels, 10 classes), split at random by `seed`; standardised with the
    training split's statistics only. `min_scale` floors every pixel's scale, in grey levels
    (of 16): a corner pixel lit in a handful of training images would otherwise be divided by a
    tiny std, and sit at tens of standard deviations in the validation split."""
    x, y = _digits_arrays()
    order = np.random.default_rng(seed).permutation(len(x))
    train, val = order[:n_train], order[n_train:n_train + n_val]
    x_train, x_val = x[train], x[val]
    if standardize:
        mean, std = x_train.mean(0), x_train.std(0)
        std[std < 1e-6] = 1.0
        std = np.maximum(std, min_scale)
        x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
    return Split(torch.from_numpy(x_train), torch.from_numpy(y[train]),
                 torch.from_numpy(x_val), torch.from_numpy(y[val]))


MIN_SEPARATION = 5.0
"""Blob centres sit at least this many spreads apart: a pair of classes is then separable with
an accuracy of at least 99% (the Bayes rate of two Gaussians 5 spreads apart is 99.4%)."""


def blobs(seed: int, n_train: int = 256, n_val: int = 256, features: int = 10,
          classes: int = 2, spread: float = 1.0, standardize: bool = False) -> Split:
    """Gaussian clusters, one per class, around random centres: easy to separate on every seed.

    The centres are drawn around the origin (their mean is subtracted, so no feature carries a
    large offset) and redrawn until every two sit `MIN_SEPARATION` spreads apart: two centres
    drawn close together would cap the best possible accuracy below a case's target. The
    features' scale is then that of the centres, a few units on some seeds; `standardize`
    rescales them with the training split's statistics, for a model whose initialisation
    assumes unit-variance inputs."""
    g = torch.Generator().manual_seed(seed)
    while True:
        centres = torch.randn(classes, features, generator=g) * 2.0
        centres = centres - centres.mean(0)
        if classes < 2 or torch.pdist(centres).min() >= MIN_SEPARATION * spread:
            break

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, classes, (n,), generator=g)
        return centres[y] + spread * torch.randn(n, features, generator=g), y

    x_train, y_train = draw(n_train)
    x_val, y_val = draw(n_val)
    if standardize:
        mean, std = x_train.mean(0), x_train.std(0)
        x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
    return Split(x_train, y_train, x_val, y_val)


def xor(seed: int, n_train: int = 256, n_val: int = 256, features: int = 2) -> Split:
    """Gaussian features; class 1 where the first two have different signs."""
    g = torch.Generator().manual_seed(seed)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, features, generator=g)
        return x, ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long()

    return Split(*draw(n_train), *draw(n_val))


def regression(seed: int, n_train: int = 256, n_val: int = 256, features: int = 4) -> Split:
    """Standardised features and a smooth target: y = sin(2 x0) + 0.5 x1.

    The features are uniform on [-sqrt(3), sqrt(3)] (mean 0, std 1): bounded, so every
    validation point lies inside the range the training points cover. Gaussian features put a
    few validation points beyond the training extremes on some seeds, where no network can
    know what the sine does, and their error alone missed a case's target."""
    g = torch.Generator().manual_seed(seed)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = (torch.rand(n, features, generator=g) * 2 - 1) * 3 ** 0.5
        return x, torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1]

    return Split(*draw(n_train), *draw(n_val))


def sequences(seed: int, n_train: int = 256, n_val: int = 256, steps: int = 50,
              features: int = 4, classes: int = 2, radius: float | None = None) -> Split:
    """Sequences (batch, time, features) of noisy readings around a class-specific level:
    any time step carries some of the label, so short memory is enough. Given `radius`, the
    levels sit at that distance from their common centre, in random directions, so no seed
    draws two classes on top of each other."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.randn(classes, features, generator=g)
    if radius is not None:
        levels = levels - levels.mean(dim=0)
        levels = radius * levels / levels.norm(dim=1, keepdim=True)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, classes, (n,), generator=g)
        x = levels[y].unsqueeze(1) + 1.5 * torch.randn(n, steps, features, generator=g)
        return x, y

    return Split(*draw(n_train), *draw(n_val))


def rows_in(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """For each row of `a`, whether an identical row exists in `b`."""
    return (a[:, None, :] == b[None, :, :]).all(dim=-1).any(dim=1)


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of the given widths with `activation` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of samples whose highest-scoring class is the label."""
    return (model(x).argmax(dim=1) == y).float().mean().item()


@torch.no_grad()
def mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared error of a regression model whose output has one column."""
    return ((model(x).reshape(-1) - y) ** 2).mean().item()


@torch.no_grad()
def binary_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    threshold: float = 0.5) -> float:
    """Accuracy of a one-output binary classifier (probabilities: threshold 0.5)."""
    return ((model(x).reshape(-1) > threshold).long() == y.long()).float().mean().item()


def scores(model: nn.Module, data: Split, losses: list[float],
           threshold: float | None = None) -> dict[str, object]:
    """What a user looks at after training a classifier: the loss curve and the accuracies
    (give `threshold` for a one-output binary classifier)."""
    if threshold is None:
        train, val = accuracy(model, data.x_train, data.y_train), accuracy(model, data.x_val, data.y_val)
    else:
        train = binary_accuracy(model, data.x_train, data.y_train, threshold)
        val = binary_accuracy(model, data.x_val, data.y_val, threshold)
    return {"losses": list(losses), "first_loss": losses[0], "final_loss": losses[-1],
            "train_accuracy": train, "val_accuracy": val}
