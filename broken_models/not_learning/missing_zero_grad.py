"""The loop never calls `optimizer.zero_grad()`.

`loss.backward()` does not overwrite `.grad`: it adds to it. Without `zero_grad()` every step
applies the sum of all gradients so far, so the effective step grows with each iteration; with
momentum on top, the weights run away and the loss climbs into the thousands. PyTorch accumulates on purpose (it is how
gradient accumulation over micro-batches works), which is why nothing warns you. This is the
third broken network of the lesson's demo.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, ratio
from broken_models.datasets import digits, mlp, scores

TITLE = "optimizer.zero_grad() is never called"
SYMPTOM = "The loss falls for a few steps, then climbs into the hundreds or thousands."
EXPECTED = ("MISSING_ZERO_GRAD",)
CAUSES = ("MISSING_ZERO_GRAD",)
CONSEQUENCES = ("LR_TOO_HIGH", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS")  # the summed gradient grows without bound
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Call optimizer.zero_grad() at the start of every step, before loss.backward()."
EVIDENCE = ("In the report, follow the gradient norms over the steps (the first finding's "
            "evidence): do they stay level, or grow step after step while the loss stops "
            "improving?")
CHANGE = "Change the loop: clear the gradients once per step, before the backward pass."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = at_least(ratio("final_loss", "first_loss"), 1.0, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(5):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(100):
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(5):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(100):
                optimizer.zero_grad()
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
