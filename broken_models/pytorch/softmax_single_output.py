"""Softmax on a single output unit.

A binary classifier with one output unit needs a sigmoid. Softmax normalises over the units of
a row, and a row with one unit always normalises to exactly 1.0: every sample gets the same
"probability", whatever its input, and no gradient can change that. The layer's output has
collapsed to a constant; the loss is frozen at the value for "always 1.0". Use a sigmoid (or
nn.BCEWithLogitsLoss on the raw unit), or two output units with softmax.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, spread
from broken_models.datasets import blobs, scores

TITLE = "Softmax on a single output unit"
SYMPTOM = "The loss never moves, and every sample gets the same prediction, exactly 1.0."
EXPECTED = ("COLLAPSED_ACTIVATIONS",)
CAUSES = ("COLLAPSED_ACTIVATIONS",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "2. Activation statistics"
FIX = "Use nn.Sigmoid() on a single output unit (softmax needs at least two)."
EVIDENCE = ("In the activation table, read the last layer's output: its mean and its spread "
            "across the batch. What can a softmax over a single unit output?")
CHANGE = "Change the output activation to one that works on a single unit."
TARGET = "validation accuracy >= 0.95"
SYMPTOM_CHECK = below(spread("losses"), 1e-7)
TARGET_CHECK = at_least("val_accuracy", 0.95)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=2)
    x, y = data.x_train, data.y_train.float()
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1), nn.Softmax(dim=1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.BCELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(x).squeeze(1), y)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history, threshold=0.5), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=2)
    x, y = data.x_train, data.y_train.float()
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.BCELoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(x).squeeze(1), y)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history, threshold=0.5), debugger)
