"""A vanilla RNN over 30 time steps with recurrent weights that are too large.

Backpropagation through time multiplies the gradient by the recurrent weight matrix once per
step. When that matrix stretches vectors (its largest singular value is above 1) the product
grows geometrically: here the matrix stretches by 2.5 per step over 30 steps (the ReLU zeroes
about half of the state, which slows the growth but does not stop it). The forward state grows
the same way, so the loss is huge and the gradients are astronomical. Accuracy alone can hide
it: the class is the sign of a logit, and a huge logit can have the right sign, but the loss
of every wrong answer is enormous and never comes down. Initialise the recurrent weights
orthogonally with gain 1 (and clip gradients, as every RNN recipe does).
"""
from __future__ import annotations


import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, metric, tail_median
from broken_models.datasets import scores, sequences

TITLE = "A vanilla RNN with large recurrent weights"
SYMPTOM = ("The first loss is thousands of times the ln(2) = 0.69 of a fresh classifier, and the "
           "loss never comes down to it.")
EXPECTED = ("EXPLODING_GRADIENT",)
CAUSES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT")
CONSEQUENCES = ("NAN_OR_INF", "LR_TOO_HIGH")  # the same blow-up, seen elsewhere
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Initialise the recurrent weights orthogonally with gain 1 (not 2.5)."
EVIDENCE = ("Set the first loss against ln(2), the loss of a fresh two-class classifier; then "
            "read the rnn layer's activation and gradient sizes in the tables and the first "
            "finding's evidence: which weights does it name?")
CHANGE = ("Change how the recurrent weights are initialised (orthogonal, with no gain that "
          "stretches the hidden state at each step).")
TARGET = "validation accuracy >= 0.9 and a median loss below 0.5 over the last 10 steps"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 10, nonfinite=True) | below("val_accuracy", 0.9, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.9) & below(tail_median("losses", 10), 0.5)


class SequenceClassifier(nn.Module):
    """An Elman RNN reads the sequence; a linear head reads its last hidden state."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.rnn = nn.RNN(features, hidden, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, last = self.rnn(x)
        return self.head(last[-1])


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = sequences(seed, steps=30, radius=2.0)
    model = SequenceClassifier(features=4, hidden=16, classes=2)
    nn.init.orthogonal_(model.rnn.weight_hh_l0, gain=2.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(50):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = sequences(seed, steps=30, radius=2.0)
    model = SequenceClassifier(features=4, hidden=16, classes=2)
    nn.init.orthogonal_(model.rnn.weight_hh_l0, gain=1.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(50):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
