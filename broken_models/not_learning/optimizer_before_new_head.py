"""The optimizer was built before the classification head was replaced.

Transfer learning in three lines: freeze the pretrained body, swap the head for one with our
number of classes, train. Here the optimizer is created one line too early, over the parameters
of the *old* head. The new head gets gradients on every backward pass, but no optimizer ever
applies them, and the frozen body does not train by design: nothing learns. An optimizer holds
the tensors it was given when it was built, not "whatever the model has now"; even `optimizer.zero_grad()` skips the new head, whose gradient
piles up step after step.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "Optimizer built before the head was replaced"
SYMPTOM = "The loss does not move and accuracy stays at chance, although the code 'trains'."
EXPECTED = ("PARAMS_NOT_UPDATED",)
CAUSES = ("PARAMS_NOT_UPDATED",)
CONSEQUENCES = ("MISSING_ZERO_GRAD", "EXPLODING_GRADIENT")  # optimizer.zero_grad() never clears the new head
TOOL = "monitor"
LESSON = "4. Overfit one batch"
FIX = "Build the optimizer after the model is final (after replacing the head)."
EVIDENCE = ("Read which layer the report says gets gradients that no optimizer step applies, then "
            "look at when the optimizer was built, against when that layer was made.")
CHANGE = "Change the order of the set-up: build the optimizer once the model is final."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.3)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def pretrained_body() -> nn.Sequential:
    """Stands in for a pretrained feature extractor: wide random ReLU features, frozen."""
    body = nn.Sequential(nn.Linear(64, 256), nn.ReLU())
    body.requires_grad_(False)
    return body


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(pretrained_body(), nn.Linear(256, 1000))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model[1] = nn.Linear(256, 10)  # our task has 10 classes, not 1000
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
    model = nn.Sequential(pretrained_body(), nn.Linear(256, 1000))
    model[1] = nn.Linear(256, 10)  # our task has 10 classes, not 1000
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
