"""Test rows copied into the training set.

"We found 150 more labelled images in the shared folder; add them to training." They were the
test set. Now the model has seen, and memorised, part of what it is graded on: the test score
rises, and it measures memory rather than generalisation. Score the copied rows apart from the
rest and the gap is obvious; de-duplicate across splits before training and it cannot happen.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, below, difference, ratio
from broken_models.datasets import Split, accuracy, digits, mlp, rows_in, scores

TITLE = "Test rows copied into the training set"
SYMPTOM = ("The test score is inflated: rows the model trained on score 100% at a loss near 0, "
           "the rest do not. The test loss is over 10% lower than on the never-seen test rows, "
           "and the accuracy higher where the model has anything left to get wrong.")
EXPECTED = ("DUPLICATES_ACROSS_SPLITS",)
CAUSES = ("DUPLICATES_ACROSS_SPLITS",)
CONSEQUENCES = ()
TOOL = "data_validator"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Split first, then de-duplicate across splits: never train on a test row."
EVIDENCE = ("Read validate_data's findings: how many test rows also appear in the training split? "
            "Compare the score on the test rows the model trained on with the score on the "
            "others.")
CHANGE = "Change how the data is split: split first, and keep every test row out of training."
TARGET = ("an honest test score: the reported accuracy and loss equal to those on the rows never "
          "trained on (within 0.005 and 5%), and that accuracy >= 0.9")
SYMPTOM_CHECK = (above(difference("val_accuracy", "clean_val_accuracy"), 0.005)
                 | below(ratio("val_loss", "clean_val_loss"), 0.9))
TARGET_CHECK = (at_most(difference("val_accuracy", "clean_val_accuracy"), 0.005)
                & at_least(ratio("val_loss", "clean_val_loss"), 0.95)
                & at_least("clean_val_accuracy", 0.9))


def unseen_scores(model: nn.Module, data: Split) -> dict[str, float]:
    """The test split's loss, and its accuracy and loss on the rows never trained on: a model
    near 99% gains little accuracy from memorised rows, but its loss on them is near 0."""
    unseen = ~rows_in(data.x_val, data.x_train)
    criterion = nn.CrossEntropyLoss()
    with torch.no_grad():
        val_loss = criterion(model(data.x_val), data.y_val).item()
        clean_val_loss = criterion(model(data.x_val[unseen]), data.y_val[unseen]).item()
    return {"val_loss": val_loss, "clean_val_loss": clean_val_loss,
            "clean_val_accuracy": accuracy(model, data.x_val[unseen], data.y_val[unseen])}


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = digits(seed, n_train=500)
    extra_x, extra_y = data.x_val[:150], data.y_val[:150]  # "more labelled images"
    data = data._replace(x_train=torch.cat([data.x_train, extra_x]), y_train=torch.cat([data.y_train, extra_y]))
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
    return Outcome(scores(model, data, debugger.loss_history) | unseen_scores(model, data),
                   debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = digits(seed, n_train=500)
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
    return Outcome(scores(model, data, debugger.loss_history) | unseen_scores(model, data),
                   debugger, findings)
