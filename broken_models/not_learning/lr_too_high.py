"""AdamW given SGD's learning rate: 0.3.

A recipe written for SGD with momentum (lr=0.3) was switched to AdamW and kept its rate. The
two read the number differently: SGD's step is the rate times the gradient, AdamW's is the rate
itself, whatever the gradient, so at 0.3 every weight moves by about 0.3 per step while the
weights themselves are a few hundredths. The first steps throw the network around, the ReLUs
die, and the loss climbs, then sits at chance. Nothing in the config looks wrong on its own;
the LR finder, or the update/weight ratio (about 1e-3 is healthy), says the rate is 100x too
high for this optimizer.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import above, at_least, tail_mean
from broken_models.datasets import digits, mlp, scores

TITLE = "AdamW with SGD's learning rate of 0.3"
SYMPTOM = ("Within ten steps the loss climbs from 2.3 to 3 or more, then sits at 2.30 (ln 10) to "
           "the end, where runs of this model end near 0.55; accuracy about 10%.")
EXPECTED = ("LR_TOO_HIGH",)
CAUSES = ("LR_TOO_HIGH",)
CONSEQUENCES = ("NAN_OR_INF", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS", "DEAD_NEURONS")  # what the blow-up leaves behind
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Use a learning rate that suits AdamW, 3e-3 (the LR finder's range), not SGD's 0.3."
EVIDENCE = ("In the report, read the first finding's evidence: how far does one update move the "
            "weights (the update/weight ratio), against the 1e-3 to 1e-2 the lesson calls "
            "typical? Then read the first losses: do they fall, or jump?")
CHANGE = ("Change the learning rate: lower it, a factor of ten at a time, until the loss falls "
          "steadily.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = above(tail_mean("losses", 10), 1.5, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    config = {
        "hidden": (128, 64),
        "lr": 0.3,
        "betas": (0.9, 0.98),
        "weight_decay": 1e-4,
        "label_smoothing": 0.1,
        "batch_size": 64,
        "epochs": 6,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], betas=config["betas"],
                                  weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss(label_smoothing=config["label_smoothing"])
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    sweep = find_learning_rate(mlp([64, *config["hidden"], 10]), data.x_train, data.y_train,
                               criterion, optimizer="adam", verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    config = {
        "hidden": (128, 64),
        "lr": 3e-3,
        "betas": (0.9, 0.98),
        "weight_decay": 1e-4,
        "label_smoothing": 0.1,
        "batch_size": 64,
        "epochs": 6,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], betas=config["betas"],
                                  weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss(label_smoothing=config["label_smoothing"])
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    sweep = find_learning_rate(mlp([64, *config["hidden"], 10]), data.x_train, data.y_train,
                               criterion, optimizer="adam", verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)
