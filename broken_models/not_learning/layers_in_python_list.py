"""Hidden layers kept in a plain Python list.

`nn.Module` finds sub-layers by looking at its attributes: a layer stored directly, or inside
`nn.ModuleList` / `nn.Sequential`, is registered; a layer inside a plain `list` is invisible.
Its weights are used in forward and even get gradients, but `model.parameters()` does not list
them, so the optimizer never updates them (and `model.to(device)` and `state_dict()` skip them
too). Only the output layer learns, on top of frozen random features.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "Hidden layers in a plain Python list"
SYMPTOM = "Accuracy plateaus far below what the architecture should reach."
EXPECTED = ("PARAMS_NOT_UPDATED",)
CAUSES = ("PARAMS_NOT_UPDATED",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Keep sub-layers in nn.ModuleList (or nn.Sequential), never in a plain list."
EVIDENCE = ("Read which parameters the report says get gradients that no step applies; then count "
            "what model.parameters() holds against the layers the forward pass uses.")
CHANGE = ("Change how the model holds its sub-layers, so that PyTorch registers them as part of "
          "the model.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.8)
TARGET_CHECK = at_least("val_accuracy", 0.9)


class StackNet(nn.Module):
    """A stack of hidden layers, whatever container holds them, and an output layer."""

    def __init__(self, hidden: list[nn.Module] | nn.ModuleList):
        super().__init__()
        self.hidden = hidden
        self.out = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = StackNet([nn.Linear(64, 32), nn.Linear(32, 8)])
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
    model = StackNet(nn.ModuleList([nn.Linear(64, 32), nn.Linear(32, 8)]))
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
