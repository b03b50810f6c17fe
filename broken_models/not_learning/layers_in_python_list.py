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
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "Hidden layers in a plain Python list"
SYMPTOM = ("The loss falls from 2.3 to about 1.9 and stalls; validation accuracy ends between "
           "40% and 65%, where a model of this size reaches 95%.")
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


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    class Classifier(nn.Module):
        def __init__(self, widths: list[int], classes: int, dropout: float):
            super().__init__()
            self.hidden = [nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:])]
            self.dropout = nn.Dropout(dropout)
            self.out = nn.Linear(widths[-1], classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.hidden:
                x = self.dropout(torch.relu(layer(x)))
            return self.out(x)

    config = {"widths": [64, 32, 16], "dropout": 0.1, "lr": 1e-2, "batch_size": 100, "epochs": 10}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = Classifier(config["widths"], classes=10, dropout=config["dropout"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    model.eval()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    class Classifier(nn.Module):
        def __init__(self, widths: list[int], classes: int, dropout: float):
            super().__init__()
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
            self.dropout = nn.Dropout(dropout)
            self.out = nn.Linear(widths[-1], classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.hidden:
                x = self.dropout(torch.relu(layer(x)))
            return self.out(x)

    config = {"widths": [64, 32, 16], "dropout": 0.1, "lr": 1e-2, "batch_size": 100, "epochs": 10}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = Classifier(config["widths"], classes=10, dropout=config["dropout"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    model.eval()
    return Outcome(scores(model, data, debugger.loss_history), debugger)
