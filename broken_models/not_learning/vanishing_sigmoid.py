"""A 12-layer MLP with sigmoid activations: the gradient vanishes on its way back.

The sigmoid's slope is at most 0.25. Backpropagation multiplies one such factor per layer, so
after a dozen layers the first layers receive a gradient some 10^6 times smaller (relative to
their weights) than the last one: they stop learning, and what reaches the output carries
almost nothing of the input. The config reads like a careful one (Xavier init, which suits
sigmoids, a tuned rate, amsgrad); what it cannot show is what happens to the gradient across
twelve layers. The lesson's gradient-flow plot shows it at a glance: a staircase of
per-layer gradient norms.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import blobs, mlp, scores

TITLE = "A 12-layer sigmoid MLP"
SYMPTOM = ("The loss starts near 1.6 and ends near 1.39 (ln 4); training and validation "
           "accuracy stay between 20% and 35% on 4 classes.")
EXPECTED = ("VANISHING_GRADIENT",)
CAUSES = ("VANISHING_GRADIENT",)
CONSEQUENCES = ("COLLAPSED_ACTIVATIONS",)  # the deep layers' outputs no longer depend on the input
TOOL = "monitor"
LESSON = "3. Gradient flow"
FIX = "Use ReLU with Kaiming initialisation (or add residual connections)."
EVIDENCE = ("In the per-layer gradient table, compare the first layers' gradient norms with the "
            "last layers': how many orders of magnitude apart are they, and which activation sits "
            "between the layers?")
CHANGE = ("Change the activation (ReLU with Kaiming initialisation), or give the gradient a "
          "shortcut around the layers (residual connections).")
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = below("val_accuracy", 0.5)
TARGET_CHECK = at_least("val_accuracy", 0.85)


def init_weights(module: nn.Module, scheme: str) -> None:
    """Initialise a linear layer's weights by the named scheme; biases at 0."""
    if isinstance(module, nn.Linear):
        if scheme == "xavier":
            nn.init.xavier_normal_(module.weight)
        else:
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(module.bias)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {
        "width": 32,
        "depth": 12,
        "activation": nn.Sigmoid,
        "init": "xavier",
        "lr": 1e-3,
        "amsgrad": True,
        "steps": 100,
    }
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5)
    model = mlp([16] + [config["width"]] * config["depth"] + [4], activation=config["activation"])
    model.apply(lambda m: init_weights(m, config["init"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"], amsgrad=config["amsgrad"])
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

    config = {
        "width": 32,
        "depth": 12,
        "activation": nn.ReLU,
        "init": "kaiming",
        "lr": 1e-3,
        "amsgrad": True,
        "steps": 100,
    }
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5)
    model = mlp([16] + [config["width"]] * config["depth"] + [4], activation=config["activation"])
    model.apply(lambda m: init_weights(m, config["init"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"], amsgrad=config["amsgrad"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
