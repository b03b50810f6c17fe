"""NaN rows in the training data.

A few scans failed and the export wrote NaN for every pixel of those rows. One NaN input gives
one NaN output, and a mean over the batch makes the whole loss NaN: the run is dead from the
first step, and the gradient that comes back turns every weight into NaN too. No amount of
learning-rate tuning helps; the fix is in the data. Check torch.isfinite(x).all() once, before
training, and drop or repair the rows it flags.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, not_finite
from broken_models.datasets import digits, mlp, scores

TITLE = "NaN rows in the training data"
SYMPTOM = "The loss is nan from the very first step."
EXPECTED = ("NONFINITE_INPUT",)
CAUSES = ("NONFINITE_INPUT",)
CONSEQUENCES = ("NAN_OR_INF",)  # the NaN loss it produces: what the debugger sees
TOOL = "data_validator"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Drop (or impute) the rows that hold NaN before training: keep x[torch.isfinite(x).all(1)]."
EVIDENCE = ("Before any training, read validate_data's findings: how many input rows hold NaN or "
            "Inf, and which ones?")
CHANGE = "Change the data before training: drop or impute the rows that are not finite."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = not_finite("first_loss")
TARGET_CHECK = at_least("val_accuracy", 0.9)


def failed_scans(data, seed: int):
    """Every 40th training row came back from the scanner as NaN."""
    x = data.x_train.clone()
    x[torch.arange(seed % 40, len(x), 40)] = float("nan")
    return data._replace(x_train=x)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = failed_scans(digits(seed), seed)
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
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
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = failed_scans(digits(seed), seed)
    keep = torch.isfinite(data.x_train).all(dim=1)
    data = data._replace(x_train=data.x_train[keep], y_train=data.y_train[keep])
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
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
