"""`optimizer.zero_grad()` called once, before training, instead of at every step.

`loss.backward()` does not overwrite `.grad`: it adds to it. The script clears the gradients,
but once, before the first epoch, as if clearing them were part of setting the optimizer up.
From then on every step applies the sum of all gradients so far, so the effective step grows
with each iteration; with momentum on top, the weights run away and the loss climbs into the
thousands. PyTorch accumulates on purpose (it is how gradient accumulation over micro-batches
works), which is why nothing warns you. This is the third broken network of the lesson's demo.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, ratio, tail_mean, head_mean
from broken_models.datasets import accuracy, digits, mlp, scores

TITLE = "optimizer.zero_grad() called once, before the training loop"
SYMPTOM = ("The loss falls for a few steps, then climbs: its last ten values average more than "
           "its first ten (often hundreds), and the validation accuracy of the epochs drops.")
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
SYMPTOM_CHECK = at_least(ratio(tail_mean("losses", 10), head_mean("losses", 10)), 1.0,
                         nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (64, 32), "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4,
              "batch_size": 100, "epochs": 8}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                                weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss()
    val_accuracy = []
    optimizer.zero_grad()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            model.train()
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
            model.eval()
            val_accuracy.append(accuracy(model, data.x_val, data.y_val))
    metrics = scores(model, data, debugger.loss_history) | {"val_accuracy_per_epoch": val_accuracy}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (64, 32), "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4,
              "batch_size": 100, "epochs": 8}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                                weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss()
    val_accuracy = []
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
            model.eval()
            val_accuracy.append(accuracy(model, data.x_val, data.y_val))
    metrics = scores(model, data, debugger.loss_history) | {"val_accuracy_per_epoch": val_accuracy}
    return Outcome(metrics, debugger)
