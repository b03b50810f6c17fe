"""`zero_grad()` inside a gradient-accumulation loop.

Gradient accumulation sums the gradients of several micro-batches before one optimizer step,
to train with a batch larger than memory allows. Here `zero_grad()` sits inside the loop over
micro-batches, so each backward pass starts from a clean slate: the step sees the gradient of
the last micro-batch only, divided by the number of micro-batches. Training runs, the loss
falls, but as if with an eighth of the data per step and an eighth of the learning rate.
Nothing crashes; the model just ends up worse than it should.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "zero_grad() inside a gradient-accumulation loop"
SYMPTOM = ("After 80 steps of 8 x 32 samples the loss is still near 1 and validation accuracy "
           "is 45-65%, where that budget usually reaches 0.1 and 94%.")
EXPECTED = ("ZERO_GRAD_IN_ACCUMULATION",)
CAUSES = ("ZERO_GRAD_IN_ACCUMULATION",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Call optimizer.zero_grad() once per optimizer step, outside the micro-batch loop."
EVIDENCE = ("In the report, read how many backward passes each optimizer step had, and what "
            "happened to the gradients between them.")
CHANGE = ("Change where the gradients are cleared: once per optimizer step, not between the "
          "micro-batches it accumulates.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.8)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def micro_batches(x: torch.Tensor, y: torch.Tensor, size: int, count: int, step: int):
    """The `count` micro-batches of optimizer step `step`, cycling through the data."""
    xs, ys = x.split(size), y.split(size)
    for k in range(count):
        i = (step * count + k) % len(xs)
        yield xs[i], ys[i]


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (32,), "lr": 0.3, "micro_batch": 32, "accumulate": 8, "steps": 80}
    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            for x, y in micro_batches(data.x_train, data.y_train, config["micro_batch"],
                                      config["accumulate"], step):
                optimizer.zero_grad()
                loss = criterion(model(x), y) / config["accumulate"]
                loss.backward()
                debugger.record_loss(loss.item() * config["accumulate"])
            optimizer.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (32,), "lr": 0.3, "micro_batch": 32, "accumulate": 8, "steps": 80}
    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            for x, y in micro_batches(data.x_train, data.y_train, config["micro_batch"],
                                      config["accumulate"], step):
                loss = criterion(model(x), y) / config["accumulate"]
                loss.backward()
                debugger.record_loss(loss.item() * config["accumulate"])
            optimizer.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)
