"""`zero_grad()` between `backward()` and `step()`.

The three calls are all there, in the wrong order: the gradients are computed, wiped, and then
the optimizer steps with zeros. Nothing changes, ever (weight decay aside, which only shrinks
the weights). The loss is flat, which looks like "the model cannot learn this" rather than "the
model is never updated". The order is always zero_grad, backward, step.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "zero_grad() called between backward() and step()"
SYMPTOM = ("The loss never leaves ln(10) = 2.3: each batch's loss differs from the others' only "
           "by which samples it holds; validation accuracy ends near 10%.")
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
SYMPTOM_CHECK = below("val_accuracy", 0.3)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (128,), "lr": 0.1, "momentum": 0.9, "nesterov": True,
              "batch_size": 50, "epochs": 4}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True, drop_last=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                                nesterov=config["nesterov"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (128,), "lr": 0.1, "momentum": 0.9, "nesterov": True,
              "batch_size": 50, "epochs": 4}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True, drop_last=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                                nesterov=config["nesterov"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
