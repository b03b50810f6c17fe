"""SGD with a learning rate of 1e-6.

The opposite mistake: every step is so small that after 150 of them the weights have
hardly moved. The loss curve looks flat, as if the model could not learn, while the gradients
are perfectly healthy. The update/weight ratio (about 1e-3 is healthy) tells the two apart.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, ratio
from broken_models.datasets import digits, mlp, scores

TITLE = "SGD with a learning rate of 1e-6"
SYMPTOM = "The loss is flat: after 150 steps it has fallen by less than 1%."
EXPECTED = ("LR_TOO_LOW",)
CAUSES = ("LR_TOO_LOW",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = ("Raise the learning rate 10x at a time until the loss falls (the fixed script uses "
       "0.2).")
EVIDENCE = ("In the report, set how much the loss moved against how far each update moves the "
            "weights (the update/weight ratio in the evidence) and how large the gradients are: "
            "is it the gradients that are small, or the steps?")
CHANGE = "Change the learning rate: raise it, a factor of ten at a time, until the loss falls."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = above(ratio("final_loss", "first_loss"), 0.99)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(150):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    sweep = find_learning_rate(mlp([64, 32, 10]), data.x_train, data.y_train, criterion, verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

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
    sweep = find_learning_rate(mlp([64, 32, 10]), data.x_train, data.y_train, criterion, verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)
