"""A vanilla RNN whose weights were initialised for a narrower one.

The init helper draws every weight from N(0, 0.35^2): a choice that worked when the hidden state
had 8 units. The state now has 64, and a 64 x 64 matrix of such entries stretches vectors by
about 0.35 * sqrt(64) = 2.8. Backpropagation through time multiplies the gradient by that matrix
once per step, and the forward state grows the same way (the ReLU zeroes about half of it,
which slows the growth but does not stop it): over 30 steps the loss is huge and the gradients
astronomical. Accuracy alone can hide it: the class is the sign of a logit, and a huge logit
can have the right sign, but the loss of every wrong answer is enormous and never comes down.
A recurrent matrix must not stretch: an orthogonal one (every singular value 1) keeps the
state's scale from step to step.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, metric, tail_median
from broken_models.datasets import scores, sequences

TITLE = "A vanilla RNN initialised with a std meant for a narrower state"
SYMPTOM = ("The first loss is over a hundred times the ln(2) = 0.69 of a fresh binary "
           "classifier, and the loss never comes down to 0.5.")
EXPECTED = ("EXPLODING_GRADIENT",)
CAUSES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT")
CONSEQUENCES = ("NAN_OR_INF", "LR_TOO_HIGH")  # the same blow-up, seen elsewhere
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Initialise the recurrent weights orthogonally (gain 1), not from N(0, 0.35^2)."
EVIDENCE = ("Set the first loss against ln(2), the loss of a fresh two-class classifier; then "
            "read the rnn layer's activation and gradient sizes in the tables and the first "
            "finding's evidence: which weights does it name?")
CHANGE = ("Change how the recurrent weights are initialised (orthogonal, with no gain that "
          "stretches the hidden state at each step).")
TARGET = "validation accuracy >= 0.9 and a median loss below 0.5 over the last 10 steps"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 10, nonfinite=True) | at_least(
    tail_median("losses", 10), 0.5, nonfinite=True)
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


def init_normal(model: nn.Module, std: float) -> None:
    """Every weight from N(0, std^2), every bias at 0."""
    for name, parameter in model.named_parameters():
        if "weight" in name:
            nn.init.normal_(parameter, std=std)
        else:
            nn.init.zeros_(parameter)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"seq_len": 30, "hidden": 64, "init_std": 0.35, "lr": 2e-3, "steps": 60}
    torch.manual_seed(seed)
    data = sequences(seed, steps=config["seq_len"], radius=0.7, n_train=512)
    model = SequenceClassifier(features=4, hidden=config["hidden"], classes=2)
    init_normal(model, config["init_std"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"seq_len": 30, "hidden": 64, "init_std": 0.35, "lr": 2e-3, "steps": 60}
    torch.manual_seed(seed)
    data = sequences(seed, steps=config["seq_len"], radius=0.7, n_train=512)
    model = SequenceClassifier(features=4, hidden=config["hidden"], classes=2)
    init_normal(model, config["init_std"])
    nn.init.orthogonal_(model.rnn.weight_hh_l0)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
