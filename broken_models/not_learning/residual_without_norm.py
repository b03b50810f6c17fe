"""Thirty residual blocks and no normalisation: the activations explode.

A residual block returns x + f(x). With f initialised the standard way (Kaiming), f(x) has
the same scale as x, so every block doubles the variance of the signal: after 30 blocks the
activations are some 30,000 times larger than the input, and so are the logits and the loss.
Transformers and ResNets normalise inside each block (pre-norm: x + f(norm(x))) so that the
sum grows slowly instead of geometrically.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, metric
from broken_models.datasets import blobs, scores

TITLE = "A residual stack without normalisation"
SYMPTOM = "The first loss is in the thousands; activations grow block after block."
EXPECTED = ("EXPLODING_ACTIVATIONS",)
CAUSES = ("EXPLODING_ACTIVATIONS",)
CONSEQUENCES = ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH", "DEAD_NEURONS")  # the blow-up and what it leaves
TOOL = "monitor"
LESSON = "2. Activation statistics"
FIX = "Normalise inside each block (pre-norm: x + f(LayerNorm(x)))."
EVIDENCE = ("In the per-layer activation table, follow the std block after block through the "
            "residual blocks: how does it grow, at the first step already, although each layer's "
            "weights look ordinary?")
CHANGE = "Change the blocks: normalise the input of each residual branch (pre-norm)."
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 1000, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.85)


class Residual(nn.Module):
    """x + f(x): the skip connection of a ResNet or a transformer block."""

    def __init__(self, f: nn.Module):
        super().__init__()
        self.f = f
        for layer in f.modules():
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=16, classes=4, spread=1.5)
    blocks = [Residual(nn.Sequential(nn.Linear(32, 32), nn.ReLU())) for _ in range(30)]
    model = nn.Sequential(nn.Linear(16, 32), *blocks, nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(80):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=16, classes=4, spread=1.5)
    blocks = [Residual(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32), nn.ReLU())) for _ in range(30)]
    model = nn.Sequential(nn.Linear(16, 32), *blocks, nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(80):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
