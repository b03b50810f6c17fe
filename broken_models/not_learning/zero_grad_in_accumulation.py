"""`zero_grad()` inside a gradient-accumulation loop.

Gradient accumulation sums the gradients of several micro-batches before one optimizer step,
to train with a batch larger than memory allows. Here `zero_grad()` sits inside the loop over
micro-batches, so each backward pass starts from a clean slate: the step sees the gradient of
the last micro-batch only, divided by the number of micro-batches. Training runs, the loss
falls, but as if with a quarter of the data per step and a quarter of the learning rate.
Nothing crashes; the model just ends up worse than it should.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "zero_grad() inside a gradient-accumulation loop"
SYMPTOM = "Accumulating over 4 micro-batches learns no faster than one: the loss falls slowly."
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
SYMPTOM_CHECK = below("val_accuracy", 0.92)
TARGET_CHECK = at_least("val_accuracy", 0.9)
MICRO_BATCHES = 4


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    criterion = nn.CrossEntropyLoss()
    xs, ys = data.x_train.split(64), data.y_train.split(64)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(80):
            for k in range(MICRO_BATCHES):
                optimizer.zero_grad()
                i = (step * MICRO_BATCHES + k) % len(xs)
                loss = criterion(model(xs[i]), ys[i]) / MICRO_BATCHES
                loss.backward()
                debugger.record_loss(loss.item() * MICRO_BATCHES)
            optimizer.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    criterion = nn.CrossEntropyLoss()
    xs, ys = data.x_train.split(64), data.y_train.split(64)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(80):
            optimizer.zero_grad()
            for k in range(MICRO_BATCHES):
                i = (step * MICRO_BATCHES + k) % len(xs)
                loss = criterion(model(xs[i]), ys[i]) / MICRO_BATCHES
                loss.backward()
                debugger.record_loss(loss.item() * MICRO_BATCHES)
            optimizer.step()
    return Outcome(scores(model, data, debugger.loss_history), debugger)
