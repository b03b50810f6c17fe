"""A learning-rate warm-up longer than the whole run.

The schedule came from a large model's config: warm the rate up linearly over 20,000 steps.
This run has 300. So the rate never gets past 1.5% of the configured 1e-3: AdamW takes steps of
a few millionths while the weights are a few hundredths, and after 300 steps they have hardly
moved. The loss curve looks flat, as if the model could not learn, while the gradients are
perfectly healthy; the config's rate is fine. The learning rate the optimizer actually used
(the debugger logs it) and the update/weight ratio (about 1e-3 is healthy) tell the story.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import above, at_least, head_mean, ratio, tail_mean
from broken_models.datasets import digits, mlp, scores

TITLE = "A learning-rate warm-up of 20,000 steps in a 300-step run"
SYMPTOM = ("After 300 steps the loss has fallen by 1-3%, from 2.3, and accuracy is 10-25%; "
           "the gradients are of ordinary size.")
EXPECTED = ("LR_TOO_LOW",)
CAUSES = ("LR_TOO_LOW",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Warm up over a small share of the run (20 steps here), not 20,000 steps."
EVIDENCE = ("In the report, read the learning rate the optimizer used at the last step against "
            "the rate the config asks for, and the update/weight ratio: is it the gradients that "
            "are small, or the steps?")
CHANGE = ("Change the learning-rate schedule: a warm-up that ends early in the run, not one "
          "longer than the run.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = above(ratio(tail_mean("losses", 10), head_mean("losses", 10)), 0.95)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    config = {
        "hidden": (128, 64),
        "lr": 1e-3,
        "weight_decay": 1e-2,
        "warmup_steps": 20_000,
        "batch_size": 100,
        "epochs": 30,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config["warmup_steps"]))
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                debugger.record_loss(loss.item())
    sweep = find_learning_rate(mlp([64, *config["hidden"], 10]), data.x_train, data.y_train,
                               criterion, optimizer="adam", verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_learning_rate

    config = {
        "hidden": (128, 64),
        "lr": 1e-3,
        "weight_decay": 1e-2,
        "warmup_steps": 20,
        "batch_size": 100,
        "epochs": 30,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config["warmup_steps"]))
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                debugger.record_loss(loss.item())
    sweep = find_learning_rate(mlp([64, *config["hidden"], 10]), data.x_train, data.y_train,
                               criterion, optimizer="adam", verbose=False)
    return Outcome(scores(model, data, debugger.loss_history), debugger, report=sweep)
