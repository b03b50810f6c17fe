"""A hand-written, class-weighted binary cross-entropy without a clamp.

The positives are the class that matters, so the script weights their term of the loss, and
writes the binary cross-entropy by hand to do it. In float32, sigmoid(z) is exactly 1.0 once z
is above about 17. A confident model reaches that on its easiest samples within a few dozen
steps, and then log(1 - p) = log(0) = -inf; multiplied by a target of 0 it becomes NaN, and the
NaN spreads through the mean to the whole loss. Built-in losses guard against this
(nn.BCEWithLogitsLoss, with its `pos_weight`, works on logits; nn.BCELoss clamps its log); a
hand-written one must clamp p to [eps, 1 - eps].
"""
from __future__ import annotations

import math

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, finite, not_finite
from broken_models.datasets import blobs, scores

TITLE = "A hand-written weighted cross-entropy without a clamp"
SYMPTOM = "The loss falls fast for a few dozen steps, then prints nan."
EXPECTED = ("LOG_OF_ZERO",)
CAUSES = ("LOG_OF_ZERO",)
CONSEQUENCES = ("NAN_OR_INF",)  # the NaN loss it produces: what the debugger sees
TOOL = "nonfinite"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Clamp the probabilities to [1e-7, 1 - 1e-7] before log (or use nn.BCEWithLogitsLoss)."
EVIDENCE = ("locate_nonfinite names the first operation that produced a NaN or Inf: which "
            "operation is it, and what value did it receive?")
CHANGE = ("Change the loss so that it never takes the log of an exact zero: keep its input off "
          "the edges, or compute it in log space.")
TARGET = "validation accuracy >= 0.95 with a finite loss"
SYMPTOM_CHECK = not_finite("final_loss")
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.95)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    config = {"hidden": 16, "pos_weight": 2.0, "lr": 0.05, "steps": 100}

    def criterion(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = p.squeeze(1)
        return -(config["pos_weight"] * y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=2)
    x, y = data.x_train, data.y_train.float()
    model = nn.Sequential(nn.Linear(10, config["hidden"]), nn.ReLU(),
                          nn.Linear(config["hidden"], 1), nn.Sigmoid())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    with NetworkDebugger(model, optimizer) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            debugger.record_loss(loss.item())
            if not math.isfinite(loss.item()):
                break  # stop at the first NaN, before it reaches the weights
            loss.backward()
            optimizer.step()
    findings = locate_nonfinite(model, x, y, criterion)
    return Outcome(scores(model, data, debugger.loss_history, threshold=0.5), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    config = {"hidden": 16, "pos_weight": 2.0, "lr": 0.05, "steps": 100}

    def criterion(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = p.squeeze(1).clamp(1e-7, 1 - 1e-7)
        return -(config["pos_weight"] * y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=2)
    x, y = data.x_train, data.y_train.float()
    model = nn.Sequential(nn.Linear(10, config["hidden"]), nn.ReLU(),
                          nn.Linear(config["hidden"], 1), nn.Sigmoid())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    with NetworkDebugger(model, optimizer) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            debugger.record_loss(loss.item())
            if not math.isfinite(loss.item()):
                break  # stop at the first NaN, before it reaches the weights
            loss.backward()
            optimizer.step()
    findings = locate_nonfinite(model, x, y, criterion)
    return Outcome(scores(model, data, debugger.loss_history, threshold=0.5), debugger, findings)
