"""`zero_grad()` between `backward()` and `step()`.

The three calls are all there, in the wrong order: the gradients are computed, wiped, and then
the optimizer steps with zeros. Nothing changes, ever. The loss is exactly flat, which looks
like "the model cannot learn this" rather than "the model is never updated". The order is
always zero_grad, backward, step.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, change
from broken_models.datasets import digits, mlp, scores

TITLE = "zero_grad() called between backward() and step()"
SYMPTOM = "The loss is exactly flat: every step prints the same number."
EXPECTED = ("PARAMS_NOT_UPDATED",)
CAUSES = ("PARAMS_NOT_UPDATED",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Call optimizer.zero_grad() before loss.backward(), never between backward() and step()."
EVIDENCE = ("Print the loss at every step: does any value change? Then read which parameters the "
            "report says get gradients that no step applies.")
CHANGE = ("Change the order of the calls in the loop: clear the gradients before the backward "
          "pass, never between it and the step.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below(change("final_loss", "first_loss"), 1e-6)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
