"""A hand-written, temperature-scaled cross-entropy that does not subtract the maximum.

The loss sharpens the logits by a temperature (divides them by 0.25) and computes the
log-softmax by hand to do it. exp(89) is already larger than the biggest float32 (about
3.4e38). A classifier that grows confident produces scaled logits that large for its easy
samples, exp returns inf, inf / inf is NaN, and the loss dies. Softmax is unchanged by
subtracting a constant from every logit, so subtracting the row maximum first (the
log-sum-exp trick) keeps every exp at most 1. F.log_softmax(logits / T) does this for you.
"""
from __future__ import annotations

import math

import torch

from broken_models.case import Outcome
from broken_models.checks import at_least, finite, not_finite
from broken_models.datasets import digits, mlp, scores

TITLE = "Softmax without subtracting the maximum"
SYMPTOM = "Accuracy is climbing when the loss suddenly prints inf or nan."
EXPECTED = ("EXP_OVERFLOW",)
CAUSES = ("EXP_OVERFLOW",)
CONSEQUENCES = ("NAN_OR_INF",)  # the NaN loss it produces: what the debugger sees
TOOL = "nonfinite"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Subtract the row maximum from the logits before exp (or use F.log_softmax)."
EVIDENCE = ("locate_nonfinite names the first operation that went non-finite: which one is it, "
            "and how large were the logits it received?")
CHANGE = "Change the hand-written softmax so that exp never sees large logits."
TARGET = "validation accuracy >= 0.9 with a finite loss"
SYMPTOM_CHECK = not_finite("final_loss")
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    config = {"hidden": (32,), "temperature": 0.25, "lr": 0.1, "steps": 100}

    def criterion(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = logits / config["temperature"]
        log_p = z - torch.log(torch.exp(z).sum(dim=1, keepdim=True))
        return -log_p[torch.arange(len(y)), y].mean()

    torch.manual_seed(seed)
    data = digits(seed)
    x, y = data.x_train, data.y_train
    model = mlp([64, *config["hidden"], 10])
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
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, locate_nonfinite

    config = {"hidden": (32,), "temperature": 0.25, "lr": 0.1, "steps": 100}

    def criterion(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = logits / config["temperature"]
        z = z - z.max(dim=1, keepdim=True).values
        log_p = z - torch.log(torch.exp(z).sum(dim=1, keepdim=True))
        return -log_p[torch.arange(len(y)), y].mean()

    torch.manual_seed(seed)
    data = digits(seed)
    x, y = data.x_train, data.y_train
    model = mlp([64, *config["hidden"], 10])
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
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)
