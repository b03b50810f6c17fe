"""A (batch, time, features) tensor turned time-major with `view` instead of `transpose`.

`x.view(T, B, F)` does not move axes: it re-reads the same memory in a new shape. The first
"time step" of the result is not time step 0 of every sample; it is the first few rows of
sample 0, then of sample 1, and so on, so each "sample" in the time-major tensor is stitched
together from several real ones. The shapes all check out and the loss still falls, but every
prediction now depends on its batch-mates. Moving an axis is `transpose`/`permute`.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import scores, sequences

TITLE = "view() across the batch dimension"
SYMPTOM = "Accuracy stays well below what the model reaches with transpose; outputs change with the batch."
EXPECTED = ("BATCH_MIXING",)
CAUSES = ("BATCH_MIXING",)
CONSEQUENCES = ()
TOOL = "batch_independence"
LESSON = "Common PyTorch bugs"
FIX = "Use x.transpose(0, 1) (or permute) to move the batch axis, never view/reshape."
EVIDENCE = ("Read check_batch_independence's findings: does one sample's output change when "
            "another sample of its batch changes?")
CHANGE = "Change how the axes are moved: a transposition, not a reshape."
TARGET = "validation accuracy >= 0.95"
SYMPTOM_CHECK = below("val_accuracy", 0.9)
TARGET_CHECK = at_least("val_accuracy", 0.95)


class TimeMajorClassifier(nn.Module):
    """Takes batch-first sequences, works time-major inside (as nn.RNN does by default):
    averages over time, then classifies."""

    def __init__(self, to_time_major: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.to_time_major = to_time_major
        self.head = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = self.to_time_major(x)          # (time, batch, features)
        return self.head(steps.mean(dim=0))    # pool over time


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_batch_independence

    torch.manual_seed(seed)
    data = sequences(seed, steps=100, radius=0.5)
    model = TimeMajorClassifier(lambda x: x.view(x.shape[1], x.shape[0], x.shape[2]))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    findings = check_batch_independence(model, data.x_val[:8])
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_batch_independence

    torch.manual_seed(seed)
    data = sequences(seed, steps=100, radius=0.5)
    model = TimeMajorClassifier(lambda x: x.transpose(0, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    findings = check_batch_independence(model, data.x_val[:8])
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)
