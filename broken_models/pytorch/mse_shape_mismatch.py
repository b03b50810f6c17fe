"""nn.MSELoss with (N, 1) predictions against (N,) targets.

A regression head returns shape (N, 1); the targets are (N,). MSELoss broadcasts the two into
an (N, N) matrix and averages all of it: every prediction is compared with every target. The
best a model can do against that is to predict the mean of all targets for every input, so it
learns exactly that. PyTorch prints a UserWarning once, which is easy to miss in a notebook.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import Quantity, above, at_most
from broken_models.datasets import mlp, mse, regression

TITLE = "MSELoss with (N, 1) predictions and (N,) targets"
SYMPTOM = ("Validation error stays at the validation targets' variance (about 0.7): the model "
           "predicts the mean for everyone.")
EXPECTED = ("LOSS_SHAPE_MISMATCH",)
CAUSES = ("LOSS_SHAPE_MISMATCH",)
CONSEQUENCES = ("DEAD_NEURONS",)  # a network that can only predict a constant lets its ReLUs die
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Make the shapes equal before the loss: model(x).squeeze(1)."
EVIDENCE = ("Print the shapes of the prediction and of the target that reach the loss, and read "
            "what the report says about them.")
CHANGE = "Change the prediction or the target so that their shapes are equal before the loss."
TARGET = "validation mean squared error <= 0.15 (the targets' variance is about 0.7)"
SYMPTOM_CHECK = above(Quantity("validation error over the validation targets' variance",
                               lambda m: m["val_mse"] / m["val_variance"]), 0.85)
TARGET_CHECK = at_most("val_mse", 0.15)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = regression(seed)
    model = mlp([4, 64, 64, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.MSELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    losses = debugger.loss_history
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val),
               "val_variance": data.y_val.var(unbiased=False).item()}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = regression(seed)
    model = mlp([4, 64, 64, 1])
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
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val),
               "val_variance": data.y_val.var(unbiased=False).item()}
    return Outcome(metrics, debugger)
