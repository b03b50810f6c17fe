"""Inputs and labels shuffled with two different permutations.

Shuffling the training set is right; shuffling the inputs and the labels *separately* pairs
every image with a random label. The network still drives its training loss down, by
memorising the random pairs, so the loss curve looks like learning. Only held-out accuracy
tells the truth: it sits at chance. The lesson's overfit-one-batch test passes here (random
pairs can be memorised); what catches it is comparing held-out accuracy with chance.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, ratio
from broken_models.datasets import digits, mlp, scores

TITLE = "Labels shuffled independently of the inputs"
SYMPTOM = ("The training loss falls, but validation accuracy stays near chance (about 10%; up to "
           "20% where the random pairing happens to give a class or two its own label).")
EXPECTED = ("LABELS_SHUFFLED",)
CAUSES = ("LABELS_SHUFFLED",)
CONSEQUENCES = ()
TOOL = "label_issues"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Shuffle inputs and labels with one permutation: x[order], y[order]."
EVIDENCE = ("Read check_labels_carry_signal's finding: what does held-out balanced accuracy "
            "reach, against chance, while the training loss falls?")
CHANGE = "Change how inputs and labels are shuffled: keep each input with its own label."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below(ratio("final_loss", "first_loss"), 0.9) & below("val_accuracy", 0.25)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_labels_carry_signal

    torch.manual_seed(seed)
    data = digits(seed, n_train=600)
    order = torch.randperm(len(data.x_train))
    data = data._replace(x_train=data.x_train[order], y_train=data.y_train[torch.randperm(len(order))])
    findings = check_labels_carry_signal(lambda: mlp([64, 32, 10]), data.x_train, data.y_train, seed=seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_labels_carry_signal

    torch.manual_seed(seed)
    data = digits(seed, n_train=600)
    order = torch.randperm(len(data.x_train))
    data = data._replace(x_train=data.x_train[order], y_train=data.y_train[order])
    findings = check_labels_carry_signal(lambda: mlp([64, 32, 10]), data.x_train, data.y_train, seed=seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)
