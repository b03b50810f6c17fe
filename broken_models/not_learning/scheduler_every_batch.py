"""A per-epoch learning-rate schedule stepped after every batch.

`StepLR(step_size=2, gamma=0.5)` means "halve the learning rate every 2 epochs" only if
`scheduler.step()` runs once per epoch. Called inside the batch loop it halves every 2 *batches*:
after 20 batches the learning rate is 1000x smaller, after 60 it is effectively 0, and training
freezes wherever it happened to be. One level of indentation; the learning rate the optimizer
actually used, logged next to the loss, makes it obvious.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import accuracy, digits, mlp, scores

TITLE = "Scheduler stepped every batch instead of every epoch"
SYMPTOM = ("The loss drops for about 20 batches, then stops moving for the remaining 60; "
           "validation accuracy ends between 30% and 75%, the same after every epoch.")
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

    config = {"hidden": (32,), "lr": 0.1, "momentum": 0.9, "lr_step_epochs": 2,
              "lr_gamma": 0.5, "batch_size": 100, "epochs": 8}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=config["lr_step_epochs"],
                                                gamma=config["lr_gamma"])
    criterion = nn.CrossEntropyLoss()
    val_accuracy = []
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
                scheduler.step()
            val_accuracy.append(accuracy(model, data.x_val, data.y_val))
    metrics = scores(model, data, debugger.loss_history) | {"val_accuracy_per_epoch": val_accuracy}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (32,), "lr": 0.1, "momentum": 0.9, "lr_step_epochs": 2,
              "lr_gamma": 0.5, "batch_size": 100, "epochs": 8}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=config["lr_step_epochs"],
                                                gamma=config["lr_gamma"])
    criterion = nn.CrossEntropyLoss()
    val_accuracy = []
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
            scheduler.step()
            val_accuracy.append(accuracy(model, data.x_val, data.y_val))
    metrics = scores(model, data, debugger.loss_history) | {"val_accuracy_per_epoch": val_accuracy}
    return Outcome(metrics, debugger)
