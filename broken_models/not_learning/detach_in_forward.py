"""`.detach()` inside forward cuts the graph.

Someone detached the features "to save memory", or copied a line from a GAN or a
target-network recipe where detaching is right. Everything before the cut never receives a
gradient: the body stays at its random initialisation and only the head learns. Nothing
errors, the loss even goes down a little. `.item()`, `.numpy()` and `torch.no_grad()` on the
path to the loss do the same.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = ".detach() inside forward"
SYMPTOM = "Accuracy plateaus far below what the architecture should reach."
EXPECTED = ("NO_GRADIENT",)
CAUSES = ("NO_GRADIENT",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Remove the .detach() on the path from the inputs to the loss."
EVIDENCE = ("In the per-layer gradient table, find the layers that get no gradient at all; then "
            "read the forward pass from the output back to where the gradient stops.")
CHANGE = ("Change the forward pass so that the path from the inputs to the loss stays "
          "differentiable.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.8)
TARGET_CHECK = at_least("val_accuracy", 0.9)
REFERENCE = ("image2reverb#37: the generator step used fake.detach(), so the generator's "
             "adversarial gradient was exactly 0")


class Net(nn.Module):
    """A body that makes features and a head that classifies them; `cut` detaches between."""

    def __init__(self, cut: bool):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU())
        self.head = nn.Linear(8, 10)
        self.cut = cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.body(x)
        if self.cut:
            features = features.detach()
        return self.head(features)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = Net(cut=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = Net(cut=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
