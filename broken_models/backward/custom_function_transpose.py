"""A custom autograd.Function whose backward transposes the weight's gradient.

Writing forward and backward by hand (for speed, or for an operation torch lacks) means
deriving the gradient yourself. For y = x W^T + b the weight's gradient is grad_y^T x, of shape
(out, in). Written as x^T grad_y it has shape (in, out): for a square weight the shapes agree,
nothing errors, and every step moves W along the wrong direction. The loss still falls,
because the output layer is fine: on nearly random tanh features it reaches 85-90% validation
accuracy (the training loss tells the two apart: above 0.35 here, under 0.1 with the right
gradient, on 51 seeds). Only a gradient check, finite differences against your backward, says
which parameter is wrong.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most
from broken_models.datasets import digits, scores

TITLE = "A custom autograd.Function with a transposed gradient"
SYMPTOM = ("The training loss stalls near 0.5 and validation accuracy near 85%, where nn.Linear "
           "reaches a loss under 0.1 and 96%.")
EXPECTED = ("GRADIENT_MISMATCH",)
CAUSES = ("GRADIENT_MISMATCH",)
CONSEQUENCES = ()
TOOL = "gradient_check"
LESSON = "1. Gradient checking"
FIX = "Return grad_output.T @ x (shape out x in) as the weight's gradient, not x.T @ grad_output."
EVIDENCE = ("gradient_check names the parameter whose analytic gradient disagrees with the "
            "numerical one: which one, by how much, and what shape is the gradient backward "
            "returns for it?")
CHANGE = "Change the custom backward's gradient for the named parameter: its orientation."
TARGET = "final training loss <= 0.15 and validation accuracy >= 0.9"
SYMPTOM_CHECK = above("final_loss", 0.2)
TARGET_CHECK = at_most("final_loss", 0.15) & at_least("val_accuracy", 0.9)


class HandMadeLinear(nn.Module):
    """A linear layer whose forward and backward are the given autograd.Function."""

    def __init__(self, size: int, function: type[torch.autograd.Function]):
        super().__init__()
        reference = nn.Linear(size, size)
        self.weight, self.bias = reference.weight, reference.bias
        self.function = function

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function.apply(x, self.weight, self.bias)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, gradient_check_report

    class LinearFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x @ weight.T + bias

        @staticmethod
        def backward(ctx, grad_y):
            x, weight = ctx.saved_tensors
            grad_weight = x.T @ grad_y
            return grad_y @ weight, grad_weight, grad_y.sum(dim=0)

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(HandMadeLinear(64, LinearFunction), nn.Tanh(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    report = gradient_check_report(model, data.x_train[:8], data.y_train[:8], criterion)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, report.findings, report)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, gradient_check_report

    class LinearFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x @ weight.T + bias

        @staticmethod
        def backward(ctx, grad_y):
            x, weight = ctx.saved_tensors
            grad_weight = grad_y.T @ x
            return grad_y @ weight, grad_weight, grad_y.sum(dim=0)

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(HandMadeLinear(64, LinearFunction), nn.Tanh(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    report = gradient_check_report(model, data.x_train[:8], data.y_train[:8], criterion)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, report.findings, report)
