"""A 20-layer ReLU net without normalisation, initialised too large.

Each layer multiplies the scale of its input by about sqrt(fan_in * std^2 / 2). With std 0.5
and 32 inputs that is 2 per layer, so 20 layers amplify the signal a millionfold, forward and
backward alike: the loss starts in the millions and the first Adam steps push it to NaN.
Kaiming initialisation (std = sqrt(2 / fan_in)) makes the factor exactly 1.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, metric
from broken_models.datasets import blobs, mlp, scores

TITLE = "A 20-layer ReLU net with a large initialisation"
SYMPTOM = "The first loss is in the thousands and training ends at NaN or near chance."
EXPECTED = ("EXPLODING_GRADIENT",)
CAUSES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT")
CONSEQUENCES = ("NAN_OR_INF", "LR_TOO_HIGH")  # the same blow-up, seen elsewhere
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Initialise with Kaiming (std = sqrt(2 / fan_in)) instead of std 0.5."
EVIDENCE = ("In the per-layer activation table, follow the activations' std from the first layer "
            "to the last: does it stay level, or grow at every layer, from the very first step?")
CHANGE = ("Change how the weights are initialised: Kaiming's variance-preserving initialisation "
          "for ReLU layers.")
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 1000, nonfinite=True) | below("val_accuracy", 0.5, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.85)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=16, classes=4, spread=1.5)
    model = mlp([16] + [32] * 19 + [4], activation=nn.ReLU)
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
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
    model = mlp([16] + [32] * 19 + [4], activation=nn.ReLU)
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(80):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
