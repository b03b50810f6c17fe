"""A 20-layer MLP with sigmoid activations: the gradient vanishes on its way back.

The sigmoid's slope is at most 0.25. Backpropagation multiplies one such factor per layer, so
after 20 layers the first layers receive a gradient some 10^15 times smaller than the last one:
they stop learning, and what reaches the output carries almost nothing of the input. The
lesson's gradient-flow plot shows it at a glance: a staircase of per-layer gradient norms.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import blobs, mlp, scores

TITLE = "A 20-layer sigmoid MLP"
SYMPTOM = "The loss stays at chance, ln(4) = 1.39, and accuracy near 25%."
EXPECTED = ("VANISHING_GRADIENT",)
CAUSES = ("VANISHING_GRADIENT",)
CONSEQUENCES = ("COLLAPSED_ACTIVATIONS",)  # the deep layers' outputs no longer depend on the input
TOOL = "monitor"
LESSON = "3. Gradient flow"
FIX = "Use ReLU with Kaiming initialisation (or add residual connections)."
EVIDENCE = ("In the per-layer gradient table, compare the first layers' gradient norms with the "
            "last layers': how many orders of magnitude apart are they, and which activation sits "
            "between the layers?")
CHANGE = ("Change the activation (ReLU with Kaiming initialisation), or give the gradient a "
          "shortcut around the layers (residual connections).")
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = below("val_accuracy", 0.4)
TARGET_CHECK = at_least("val_accuracy", 0.85)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=16, classes=4, spread=1.5)
    model = mlp([16] + [32] * 19 + [4], activation=nn.Sigmoid)
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.xavier_normal_(layer.weight)
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
