"""Softmax at the end of the model, fed to nn.CrossEntropyLoss.

CrossEntropyLoss expects raw scores (logits) and applies log-softmax itself. Give it
probabilities and it applies softmax a second time, to numbers squeezed into [0, 1]: the
resulting distribution can never be confident (at best e / (e + 9) = 23% for 10 classes), the
loss cannot go below about 1.46, and gradients are small, so training is slow and stalls. It
is one of the most common PyTorch bugs because the model "looks right" with a softmax on top.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below
from broken_models.datasets import digits, scores

TITLE = "Softmax before nn.CrossEntropyLoss"
SYMPTOM = "The loss stalls above 1.46, however long it trains; learning is slow."
EXPECTED = ("DOUBLE_SOFTMAX",)
CAUSES = ("DOUBLE_SOFTMAX",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Remove the softmax from the model: CrossEntropyLoss takes logits."
EVIDENCE = ("In the report, read what the loss was fed: the range of its inputs (probabilities "
            "between 0 and 1, or raw scores?), and where the loss stalls.")
CHANGE = "Change the model's output so that the loss gets what it expects."
TARGET = "validation accuracy >= 0.9 and a training loss below 0.5"
SYMPTOM_CHECK = above("final_loss", 1.46)
TARGET_CHECK = at_least("val_accuracy", 0.9) & below("final_loss", 0.5)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10), nn.Softmax(dim=1))
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
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
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
