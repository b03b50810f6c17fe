"""Twenty per cent of the training labels are wrong.

An annotation vendor mixed up one label in five. A network trained long enough memorises the
wrong labels along with the right ones, and every memorised error costs accuracy on new data.
Real data sets are never clean (Northcutt et al. 2021 found 3-6% label errors in the test sets
of ImageNet, CIFAR and others), so the lesson's tool is confident learning: train out-of-sample,
flag the samples the model confidently assigns to another class, and review those first.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "20% of the labels flipped"
SYMPTOM = "The network fits its training labels, yet validation accuracy falls to about 80%."
EXPECTED = ("LABEL_NOISE",)
CAUSES = ("LABEL_NOISE",)
CONSEQUENCES = ()
TOOL = "label_issues"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Find the flagged samples with find_label_issues and relabel them (here: use the true labels)."
EVIDENCE = ("Read find_label_issues' findings: how many samples does it flag, and do their given "
            "labels match their images?")
CHANGE = "Change the labels: review and correct the samples confident learning flags."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.88)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def wrong_labels(y: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    """Replace `share` of the labels by a different, random class."""
    g = torch.Generator().manual_seed(seed)
    flip = torch.rand(len(y), generator=g) < share
    shift = torch.randint(1, 10, (len(y),), generator=g)
    return torch.where(flip, (y + shift) % 10, y)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_label_issues

    torch.manual_seed(seed)
    data = digits(seed, n_train=600)
    data = data._replace(y_train=wrong_labels(data.y_train, 0.2, seed))
    issues = find_label_issues(lambda: mlp([64, 32, 10]), data.x_train, data.y_train, seed=seed)
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
    return Outcome(scores(model, data, debugger.loss_history), debugger, issues.findings, issues)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, find_label_issues

    torch.manual_seed(seed)
    data = digits(seed, n_train=600)
    issues = find_label_issues(lambda: mlp([64, 32, 10]), data.x_train, data.y_train, seed=seed)
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
    return Outcome(scores(model, data, debugger.loss_history), debugger, issues.findings, issues)
