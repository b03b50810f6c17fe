"""A linear model on data that needs a hidden layer.

The machine trips when its two signals have different signs (an XOR): no straight line
separates the classes, so a linear classifier tops out near chance however long it trains.
Nothing is broken in the code; the model is too small for the problem, and a config with
`"hidden": ()` (a linear baseline) looks like a reasonable first step. The lesson's
overfit-one-batch test catches it in seconds: a model that cannot memorise 32 samples will not
learn 10,000 (16 XOR points are, now and then, separable by a line after all; 32 were not on
any of 61 seeds tried).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import Split, mlp, scores, xor

TITLE = "A linear model on XOR-shaped data"
SYMPTOM = ("Training and validation accuracy both stay below 75% on two balanced classes "
           "(chance is 50%); the loss stays near ln(2) = 0.69.")
EXPECTED = ("UNDERFITTING",)
CAUSES = ("UNDERFITTING",)
CONSEQUENCES = ()
TOOL = "overfit"
LESSON = "4. Overfit one batch"
FIX = "Add capacity: one hidden layer (2 -> 32 -> 2 with ReLU) is enough."
EVIDENCE = ("Read the overfit-one-batch result in outcome.findings: can the model memorise even a "
            "handful of samples? Then plot the two classes: can a straight line separate them?")
CHANGE = ("Change the model: give it the capacity to draw a boundary that is not a straight "
          "line.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("train_accuracy", 0.75)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def load_signals(seed: int) -> Split:
    """Two sensor signals per sample, and whether the machine tripped."""
    return xor(seed, n_train=512)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, overfit_one_batch

    config = {"hidden": (), "lr": 1e-2, "weight_decay": 1e-4, "batch_size": 32, "epochs": 15}
    torch.manual_seed(seed)
    data = load_signals(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([2, *config["hidden"], 2])
    criterion = nn.CrossEntropyLoss()
    check = overfit_one_batch(model, data.x_train[:32], data.y_train[:32], criterion, steps=400,
                             verbose=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, check.findings, check)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, overfit_one_batch

    config = {"hidden": (32,), "lr": 1e-2, "weight_decay": 1e-4, "batch_size": 32, "epochs": 15}
    torch.manual_seed(seed)
    data = load_signals(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([2, *config["hidden"], 2])
    criterion = nn.CrossEntropyLoss()
    check = overfit_one_batch(model, data.x_train[:32], data.y_train[:32], criterion, steps=400,
                             verbose=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, check.findings, check)
