"""Adam given Adadelta's learning rate of 1.0, on a deep network.

The script grew out of PyTorch's MNIST example, which trains with Adadelta at lr=1.0 (a rate
Adadelta rescales by its own running statistics). Someone switched the optimizer to Adam and
kept the rate. Adam normalises each step to about the learning rate, whatever the gradient: at
1.0 every weight moves by about 1 on the very first step, while the weights themselves are
about 0.1. Sixteen stacked layers then multiply the signal by some 10^20, the squared error
overflows float32 to inf, and the next backward pass turns everything into NaN. Adam's usual
starting point is 1e-3, a thousand times smaller.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, at_most, head_mean, ratio, tail_mean
from broken_models.datasets import mse, mlp, regression

TITLE = "Adam given Adadelta's lr=1.0 on a deep net"
SYMPTOM = "The second loss printed is inf or in the billions, and every one after it is nan."
EXPECTED = ("LR_TOO_HIGH", "NAN_OR_INF")
CAUSES = ("LR_TOO_HIGH",)
CONSEQUENCES = ("NAN_OR_INF", "EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT", "DEAD_NEURONS")  # all from the blow-up
TOOL = "monitor"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Use Adam's usual learning rate, 1e-3 (1.0 is Adadelta's)."
EVIDENCE = ("In the report, read the first finding's evidence: how far did the first updates move "
            "the weights, relative to their norm, and what did the loss do in the next steps?")
CHANGE = "Change the learning rate: lower it, a factor of ten at a time, until the loss falls."
TARGET = "validation mean squared error <= 0.35 (the targets' variance is about 0.7)"
SYMPTOM_CHECK = at_least(ratio(tail_mean("losses", 5), head_mean("losses", 1)), 10, nonfinite=True)
TARGET_CHECK = at_most("val_mse", 0.35)

OPTIMIZERS = {"adadelta": torch.optim.Adadelta, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"width": 128, "depth": 15, "optimizer": "adam", "lr": 1.0, "steps": 60}
    torch.manual_seed(seed)
    data = regression(seed)
    model = mlp([4] + [config["width"]] * config["depth"] + [1])
    for layer in model[:-1]:  # the hidden layers, each followed by a ReLU
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    optimizer = OPTIMIZERS[config["optimizer"]](model.parameters(), lr=config["lr"])
    criterion = nn.MSELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train).squeeze(1), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    losses = debugger.loss_history
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val)}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"width": 128, "depth": 15, "optimizer": "adam", "lr": 1e-3, "steps": 60}
    torch.manual_seed(seed)
    data = regression(seed)
    model = mlp([4] + [config["width"]] * config["depth"] + [1])
    for layer in model[:-1]:  # the hidden layers, each followed by a ReLU
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    optimizer = OPTIMIZERS[config["optimizer"]](model.parameters(), lr=config["lr"])
    criterion = nn.MSELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train).squeeze(1), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    losses = debugger.loss_history
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "val_mse": mse(model, data.x_val, data.y_val)}
    return Outcome(metrics, debugger)
