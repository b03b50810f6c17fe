"""Every weight and bias initialised to zero.

With all weights equal, every hidden unit computes the same function of the input, receives
the same gradient and takes the same step: they stay identical forever, so a layer of 32 units
is worth one. With zeros exactly it is worse: tanh(0) = 0, so no gradient reaches the first
layer either, and only the output bias learns the class frequencies. Random initialisation is
not a detail; it is what makes the units different.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "All-zero initialisation"
SYMPTOM = "The loss stays at ln(10) = 2.30 and accuracy at chance (about 10%)."
EXPECTED = ("SYMMETRIC_WEIGHTS",)
CAUSES = ("SYMMETRIC_WEIGHTS",)
CONSEQUENCES = ("COLLAPSED_ACTIVATIONS",)  # identical units give identical (zero) outputs
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Keep PyTorch's random default initialisation (or Xavier for tanh); never a constant."
EVIDENCE = ("In the per-layer activation table, read the hidden layers' across-batch std; then "
            "compare the rows of a hidden layer's weight: how many different units does the layer "
            "really have?")
CHANGE = ("Change how the weights are initialised: random (PyTorch's default init), so that the "
          "units start different.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.2)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10], activation=nn.Tanh)
    for parameter in model.parameters():
        nn.init.zeros_(parameter)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
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
    model = mlp([64, 32, 10], activation=nn.Tanh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
