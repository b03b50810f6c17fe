"""A feature transform computed in NumPy cuts the graph inside forward.

The feature transform, log(1 + h), was ported from a NumPy pipeline: `h.numpy()` refuses a
tensor that requires grad, and PyTorch's own error message suggests `h.detach().numpy()`. That
runs, and it cuts the graph: everything before the transform never receives a gradient. The
encoder stays at its random initialisation and only the head learns. Nothing errors, the loss
even goes down. `.item()`, `.detach()` and `torch.no_grad()` on the path to the loss do the
same; `torch.log1p` computes the same values and keeps the graph.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "A NumPy round trip (.detach().numpy()) inside forward"
SYMPTOM = ("The loss creeps from 2.3 to about 2.1 and flattens; validation accuracy ends "
           "between 30% and 55%, where a model of this size reaches 95%.")
EXPECTED = ("NO_GRADIENT",)
CAUSES = ("NO_GRADIENT",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Compute the transform with torch (torch.log1p) so the graph reaches the encoder."
EVIDENCE = ("In the per-layer gradient table, find the layers that get no gradient at all; then "
            "read the forward pass from the output back to where the gradient stops.")
CHANGE = ("Change the forward pass so that the path from the inputs to the loss stays "
          "differentiable.")
TARGET = "validation accuracy >= 0.9"
REFERENCE = ("image2reverb#37: the generator step used fake.detach(), so the generator's "
             "adversarial gradient was exactly 0")
SYMPTOM_CHECK = below("val_accuracy", 0.7)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def log_features(h: torch.Tensor) -> torch.Tensor:
    """log(1 + h) of the non-negative features, as the NumPy pipeline computed them."""
    return torch.from_numpy(np.log1p(h.detach().numpy()))


class FeatureClassifier(nn.Module):
    """An encoder, a transform of its features, a linear head."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor], width: int):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 2 * width), nn.ReLU(),
                                     nn.Linear(2 * width, width), nn.ReLU())
        self.transform = transform
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.transform(self.encoder(x)))


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"width": 16, "lr": 3e-3, "batch_size": 100, "epochs": 20}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = FeatureClassifier(log_features, config["width"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"width": 16, "lr": 3e-3, "batch_size": 100, "epochs": 20}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = FeatureClassifier(torch.log1p, config["width"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
