"""The same transposed gradient, in the NumPy mini-framework of exercise 5.

Without autograd every layer's backward is hand-written, so this is where such bugs live. The
first linear layer's weight gradient below comes back transposed: square, so the shapes match,
and training "works", only worse. A gradient check compares each parameter's backward with
finite differences of the loss and names the one that disagrees: `0.weight`, here.
"""
from __future__ import annotations

import numpy as np

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most
from broken_models.datasets import digits

TITLE = "A transposed weight gradient in the NumPy mini-framework"
SYMPTOM = "The loss stalls above 0.2 and accuracy sags, where the correct backward reaches 0.05 and 96%."
EXPECTED = ("GRADIENT_MISMATCH",)
CAUSES = ("GRADIENT_MISMATCH",)
CONSEQUENCES = ()
TOOL = "gradient_check"
LESSON = "1. Gradient checking"
FIX = "In Linear.backward, the weight's gradient is grad_out.T @ x (out x in); drop the transpose."
EVIDENCE = ("The gradient check names the parameter whose backward disagrees with finite "
            "differences: which layer, which parameter?")
CHANGE = "Change that layer's backward formula for the weight's gradient: its orientation."
TARGET = "final training loss <= 0.12 and validation accuracy >= 0.9"
SYMPTOM_CHECK = above("final_loss", 0.2)
TARGET_CHECK = at_most("final_loss", 0.12) & at_least("val_accuracy", 0.9)


def accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    return float((model.forward(x).argmax(axis=1) == y).mean())


def train_broken(seed: int) -> Outcome:
    from lesson.checks.miniframework import SGD, Linear, Sequential, SoftmaxCrossEntropy, ReLU, gradient_check

    data = digits(seed)
    x, y = data.x_train.double().numpy(), data.y_train.numpy()
    rng = np.random.default_rng(seed)
    model = Sequential(Linear(64, 64, bug="transposed_weight", rng=rng), ReLU(), Linear(64, 10, rng=rng))
    loss_fn = SoftmaxCrossEntropy()
    report = gradient_check(model, loss_fn, x[:8], y[:8])
    optimizer = SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(100):
        losses.append(loss_fn.forward(model.forward(x), y))
        model.zero_grad()
        model.backward(loss_fn.backward())
        optimizer.step()
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "train_accuracy": accuracy(model, x, y),
               "val_accuracy": accuracy(model, data.x_val.double().numpy(), data.y_val.numpy())}
    return Outcome(metrics, findings=report.findings, report=report)


def train_fixed(seed: int) -> Outcome:
    from lesson.checks.miniframework import SGD, Linear, Sequential, SoftmaxCrossEntropy, ReLU, gradient_check

    data = digits(seed)
    x, y = data.x_train.double().numpy(), data.y_train.numpy()
    rng = np.random.default_rng(seed)
    model = Sequential(Linear(64, 64, rng=rng), ReLU(), Linear(64, 10, rng=rng))
    loss_fn = SoftmaxCrossEntropy()
    report = gradient_check(model, loss_fn, x[:8], y[:8])
    optimizer = SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(100):
        losses.append(loss_fn.forward(model.forward(x), y))
        model.zero_grad()
        model.backward(loss_fn.backward())
        optimizer.step()
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "train_accuracy": accuracy(model, x, y),
               "val_accuracy": accuracy(model, data.x_val.double().numpy(), data.y_val.numpy())}
    return Outcome(metrics, findings=report.findings, report=report)
