"""Training data sorted by label, and never shuffled.

The images were loaded folder by folder: all the 0s, then all the 1s, and so on. Mini-batch
training without shuffling shows the network five batches of zeros in a row, then five of ones: each stretch
drags the output towards its single class and undoes the stretch before. At the end of every
epoch the model mostly predicts whatever came last. Each batch's loss looks fine; the model is
not. DataLoader(shuffle=True), or a fresh permutation every epoch, fixes it.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "Data sorted by label and not shuffled"
SYMPTOM = "Each batch's loss falls, yet validation accuracy ends several points below the shuffled run's 93%."
EXPECTED = ("UNSHUFFLED_BATCHES",)
CAUSES = ("UNSHUFFLED_BATCHES",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Shuffle the training set every epoch (a new torch.randperm, or DataLoader(shuffle=True))."
EVIDENCE = ("Look at the labels of a few training batches (the report's batch evidence): how many "
            "classes does each batch hold?")
CHANGE = "Change the order of the training data: shuffle it every epoch."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.9)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    by_label = torch.argsort(data.y_train, stable=True)  # loaded one class folder at a time
    data = data._replace(x_train=data.x_train[by_label], y_train=data.y_train[by_label])
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(3):
            order = torch.arange(len(data.x_train))
            for batch in order.split(20):
                optimizer.zero_grad()
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    by_label = torch.argsort(data.y_train, stable=True)  # loaded one class folder at a time
    data = data._replace(x_train=data.x_train[by_label], y_train=data.y_train[by_label])
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(3):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(20):
                optimizer.zero_grad()
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
