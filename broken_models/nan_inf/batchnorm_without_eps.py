"""A hand-written batch standardisation that divides by the batch's std, with no epsilon.

Batch norm divides each feature by its standard deviation over the batch. Some features do not
vary at all: the corner pixels of these digits are 0 in every image. Their standard deviation
is exactly 0, so (x - mean) / std = 0 / 0 = NaN on the very first batch. nn.BatchNorm1d adds
eps = 1e-5 to the variance for exactly this reason; a home-made version must too.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, finite, not_finite
from broken_models.datasets import digits, scores

TITLE = "Batch standardisation by hand, without epsilon"
SYMPTOM = "The very first loss is nan."
EXPECTED = ("DIVISION_BY_ZERO",)
CAUSES = ("DIVISION_BY_ZERO",)
CONSEQUENCES = ("NAN_OR_INF",)  # the NaN loss it produces: what the debugger sees
TOOL = "nonfinite"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Divide by sqrt(var + eps) with eps = 1e-5 (or use nn.BatchNorm1d)."
EVIDENCE = ("locate_nonfinite names the first operation that went non-finite: which one is it, "
            "and what was in its denominator for this batch?")
CHANGE = "Change the hand-written normalisation so that its denominator can never be zero."
TARGET = "validation accuracy >= 0.9 with a finite loss"
SYMPTOM_CHECK = not_finite("first_loss")
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    class BatchStandardize(nn.Module):
        """Each feature standardised with the statistics of the current batch (the model
        takes raw pixels and normalises them itself)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mean, var = x.mean(dim=0), x.var(dim=0, unbiased=False)
            return (x - mean) / torch.sqrt(var)

    config = {"hidden": 32, "lr": 1e-2, "steps": 100}
    torch.manual_seed(seed)
    data = digits(seed, standardize=False)
    model = nn.Sequential(BatchStandardize(), nn.Linear(64, config["hidden"]), nn.ReLU(),
                          nn.Linear(config["hidden"], 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            debugger.record_loss(loss.item())
            if not math.isfinite(loss.item()):
                break  # stop at the first NaN, before it reaches the weights
            loss.backward()
            optimizer.step()
    findings = locate_nonfinite(model, data.x_train, data.y_train, criterion)
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    class BatchStandardize(nn.Module):
        """Each feature standardised with the statistics of the current batch (the model
        takes raw pixels and normalises them itself)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mean, var = x.mean(dim=0), x.var(dim=0, unbiased=False)
            return (x - mean) / torch.sqrt(var + 1e-5)

    config = {"hidden": 32, "lr": 1e-2, "steps": 100}
    torch.manual_seed(seed)
    data = digits(seed, standardize=False)
    model = nn.Sequential(BatchStandardize(), nn.Linear(64, config["hidden"]), nn.ReLU(),
                          nn.Linear(config["hidden"], 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            debugger.record_loss(loss.item())
            if not math.isfinite(loss.item()):
                break  # stop at the first NaN, before it reaches the weights
            loss.backward()
            optimizer.step()
    findings = locate_nonfinite(model, data.x_train, data.y_train, criterion)
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)
