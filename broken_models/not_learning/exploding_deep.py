"""A 10-layer ReLU net initialised from a normal law with the uniform law's bound as its std.

Kaiming's uniform initialisation for a ReLU layer draws from U(-b, b) with b = sqrt(6 / fan_in),
whose standard deviation is b / sqrt(3) = sqrt(2 / fan_in): the scale that keeps the signal's
variance from layer to layer. The helper below computes that bound and then draws from a
*normal* law with the bound as its standard deviation, sqrt(3) times too large. Each layer then
triples the variance of its input: after 10 layers the logits are some 250 times too large,
forward and backward alike. The first loss is in the hundreds, the gradients are huge, and the
first SGD steps throw the weights so far that the loss turns to NaN. The formula looks like
Kaiming's; the activation statistics and the gradient norms say what it does. (The inputs are
standardised, as Kaiming's scale assumes: on raw blobs a seed's features can be a few units
wide, and even the right initialisation then starts too hot.)
"""
from __future__ import annotations

import math

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, metric
from broken_models.datasets import blobs, mlp, scores

TITLE = "A 10-layer ReLU net drawn from a normal law with a uniform bound as std"
SYMPTOM = ("The first loss is in the hundreds or thousands (a fresh 4-class model starts near "
           "1.4), and within a few steps the loss prints nan; accuracy ends near 25%.")
EXPECTED = ("EXPLODING_GRADIENT",)
CAUSES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT")
CONSEQUENCES = ("NAN_OR_INF", "LR_TOO_HIGH", "DEAD_NEURONS")  # the same blow-up, and the ReLUs it kills
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Draw the weights from U(-b, b) with b = sqrt(6 / fan_in), or N(0, 2 / fan_in): the bound is not a std."
EVIDENCE = ("In the per-layer activation table, follow the activations' std from the first layer "
            "to the last: does it stay level, or grow at every layer, from the very first step?")
CHANGE = ("Change how the weights are initialised: Kaiming's variance-preserving initialisation "
          "for ReLU layers.")
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 50, nonfinite=True) | below(
    "val_accuracy", 0.75, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.85)


def he_bound(layer: nn.Linear) -> float:
    """He (Kaiming) initialisation's bound for a linear layer followed by a ReLU."""
    return math.sqrt(6.0 / layer.in_features)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"width": 32, "depth": 10, "lr": 0.01, "steps": 100}
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5, standardize=True)
    model = mlp([16] + [config["width"]] * config["depth"] + [4])
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=he_bound(layer))
            nn.init.zeros_(layer.bias)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
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

    config = {"width": 32, "depth": 10, "lr": 0.01, "steps": 100}
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5, standardize=True)
    model = mlp([16] + [config["width"]] * config["depth"] + [4])
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.uniform_(layer.weight, -he_bound(layer), he_bound(layer))
            nn.init.zeros_(layer.bias)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
