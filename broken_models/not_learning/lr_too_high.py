"""SGD with a learning rate of 10.

Each step is meant to walk a little way downhill. At lr=10 it jumps far past the valley floor
and lands higher up the other side, so the loss bounces around (or blows up to NaN) instead of
falling. The lesson's first check for a loss that will not decrease: the learning rate. For SGD
start around 0.1 or 0.01 and try three values a factor of 10 apart before blaming anything else.
"""
from __future__ import annotations


import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, finite, ratio
from broken_models.datasets import digits, mlp, scores

TITLE = "SGD with a learning rate of 10"
SYMPTOM = "The loss bounces around and ends no lower than where it started (or turns NaN)."
EXPECTED = ("LR_TOO_HIGH",)
CAUSES = ("LR_TOO_HIGH",)
CONSEQUENCES = ("NAN_OR_INF", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS", "DEAD_NEURONS")  # what the blow-up leaves behind
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = ("Lower the learning rate 10x at a time until the loss falls steadily (the fixed "
       "script uses 0.2).")
EVIDENCE = ("In the report, read the first finding's evidence: how far does one update move the "
            "weights (the update/weight ratio), against the 1e-3 to 1e-2 the lesson calls "
            "typical? Then read the first losses: do they fall, or jump?")
CHANGE = ("Change the learning rate: lower it, a factor of ten at a time, until the loss falls "
          "steadily.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = at_least(ratio("final_loss", "first_loss"), 0.5, nonfinite=True)
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
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
