"""Dead ReLUs: every weight set to -1 and every bias to -5.

A ReLU passes a gradient only where its input is positive. Start a layer with large negative
weights and biases and its units output 0 for every sample: no signal forward, no gradient
backward, and no way to recover. The second hidden layer below is dead from step 0; only the
output bias learns, so the loss stays at chance. The lesson's check: print the fraction of
units that are 0 for the whole batch after each ReLU; above 50% something is wrong.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "Dead ReLUs from weights of -1 and biases of -5"
SYMPTOM = "The loss is stuck near ln(10) = 2.30 and accuracy stays at chance (about 10%)."
EXPECTED = ("DEAD_NEURONS",)
CAUSES = ("DEAD_NEURONS", "SYMMETRIC_WEIGHTS")  # a constant init is also symmetric: both are true
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Drop the hand-made initialisation and keep PyTorch's default (Kaiming-uniform) init."
EVIDENCE = ("In the per-layer activation table, read the `dead=` column: which layer's units "
            "output 0 for every sample, and since which step (the finding's first step)?")
CHANGE = ("Change how the layers are initialised: let PyTorch's default (or Kaiming) "
          "initialisation set the weights and biases.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.2)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 32, 10])
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.fill_(-1.0)
                layer.bias.fill_(-5.0)
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
    model = mlp([64, 32, 32, 10])
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
