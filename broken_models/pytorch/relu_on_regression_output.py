"""A ReLU on the output of a regression model whose targets can be negative.

The model was copied from a classifier's body and the final ReLU came along. A ReLU cannot
output anything below 0, and about half of these targets are negative: for those samples the
best the model can say is 0, and wherever the output unit is at 0 no gradient flows back to
tell it otherwise. The error plateaus at roughly the negative targets' share of the variance.
The last layer must be able to reach the targets: a plain Linear for unbounded ones.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most
from broken_models.datasets import mse, regression

TITLE = "ReLU on a regression output with negative targets"
SYMPTOM = "The model never predicts a negative value; validation error plateaus high."
EXPECTED = ("OUTPUT_RANGE_MISMATCH",)
CAUSES = ("OUTPUT_RANGE_MISMATCH",)
CONSEQUENCES = ("DEAD_NEURONS",)  # the output ReLU itself sits at 0 for every sample
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Drop the final ReLU: a regression output is a plain nn.Linear."
EVIDENCE = ("Set the range of the model's outputs (the last layer's row in the activation table) "
            "against the range of the targets: can it reach the negative ones?")
CHANGE = "Change the output layer so that it can produce every value the targets take."
TARGET = "validation mean squared error <= 0.15 (the targets' variance is about 0.7)"
SYMPTOM_CHECK = at_least("min_prediction", 0) & above("val_mse", 0.2)
TARGET_CHECK = at_most("val_mse", 0.15)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = regression(seed)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1), nn.ReLU())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.MSELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train).squeeze(1), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    losses = debugger.loss_history
    with torch.no_grad():
        lowest = model(data.x_val).min().item()
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val), "min_prediction": lowest}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = regression(seed)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.MSELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train).squeeze(1), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    losses = debugger.loss_history
    with torch.no_grad():
        lowest = model(data.x_val).min().item()
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val), "min_prediction": lowest}
    return Outcome(metrics, debugger)
