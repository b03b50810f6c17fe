"""Two annotation passes merged without resolving their disagreements.

The first 300 images were labelled twice, by two annotators, and both passes were appended to
the training set. Where the annotators disagree, the same image now appears twice with two
different labels. No model can fit both: the training loss has a floor, and the model is
pulled between the two answers. Identical inputs with different labels are easy to find
mechanically; resolve them at the source (a third opinion, or drop them).
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "Identical inputs with different labels"
SYMPTOM = "Training accuracy cannot reach 100%, even for a network big enough to memorise."
EXPECTED = ("CONFLICTING_LABELS",)
CAUSES = ("CONFLICTING_LABELS",)
CONSEQUENCES = ()
TOOL = "data_validator"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Resolve disagreements before merging label passes: keep only the labels both agree on."
EVIDENCE = "Read validate_data's findings: how many inputs appear twice with different labels?"
CHANGE = "Change the labels: resolve the passes that disagree before merging them."
TARGET = "training accuracy >= 0.99 and validation accuracy >= 0.9"
SYMPTOM_CHECK = below("train_accuracy", 0.97)
TARGET_CHECK = at_least("train_accuracy", 0.99) & at_least("val_accuracy", 0.9)


def second_annotator(y: torch.Tensor, seed: int) -> torch.Tensor:
    """Another pass over the same images: agrees with the first about 70% of the time."""
    g = torch.Generator().manual_seed(seed + 1)
    disagree = torch.rand(len(y), generator=g) < 0.3
    return torch.where(disagree, (y + torch.randint(1, 10, (len(y),), generator=g)) % 10, y)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = digits(seed)
    second = second_annotator(data.y_train[:300], seed)
    keep = torch.ones(300, dtype=torch.bool)
    data = data._replace(x_train=torch.cat([data.x_train, data.x_train[:300][keep]]),
                         y_train=torch.cat([data.y_train, second[keep]]))
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
    model = mlp([64, 64, 10])
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
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = digits(seed)
    second = second_annotator(data.y_train[:300], seed)
    keep = second == data.y_train[:300]
    data = data._replace(x_train=torch.cat([data.x_train, data.x_train[:300][keep]]),
                         y_train=torch.cat([data.y_train, second[keep]]))
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
    model = mlp([64, 64, 10])
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
