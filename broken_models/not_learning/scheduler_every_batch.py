"""A per-epoch learning-rate schedule stepped after every batch.

`StepLR(step_size=2, gamma=0.5)` means "halve the learning rate every 2 epochs" only if
`scheduler.step()` runs once per epoch. Called inside the batch loop it halves every 2 *batches*:
after 20 batches the learning rate is 1000x smaller, after 60 it is effectively 0, and training
freezes wherever it happened to be. Log the learning rate next to the loss and it is obvious.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "Scheduler stepped every batch instead of every epoch"
SYMPTOM = "The loss drops briefly, then freezes well above where it should end."
EXPECTED = ("LR_DECAYED",)
CAUSES = ("LR_DECAYED",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Call scheduler.step() once per epoch, after the batch loop."
EVIDENCE = ("Read the learning rate the report says the optimizer ends with against the one it "
            "starts with, and count how often the scheduler stepped against the epochs it was "
            "sized for.")
CHANGE = ("Change how often the learning-rate scheduler steps: once per epoch, as its period "
          "assumes.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.8)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(8):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(100):
                optimizer.zero_grad()
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
                scheduler.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(8):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(100):
                optimizer.zero_grad()
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
            scheduler.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)
