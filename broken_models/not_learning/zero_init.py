"""A zero-initialisation meant for the classifier head, applied to every layer.

Starting the last layer at zero is a common trick: the first predictions are uniform and the
first loss is exactly ln(C). The helper below does that, and `model.apply` runs it on every
linear layer instead of the head alone. With all weights equal, every hidden unit computes the
same function of the input, receives the same gradient and takes the same step: a layer of 64
units is worth one. With zeros exactly it is worse: tanh(0) = 0, so no gradient reaches the
weights at all, and only the output bias learns the class frequencies. Random initialisation is
not a detail; it is what makes the units different.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, mlp, scores

TITLE = "A zero-init meant for the head, applied to every layer"
SYMPTOM = ("The first loss is exactly 2.3026 (ln 10), as intended, and it never falls below "
           "2.29; accuracy stays near 10%.")
EXPECTED = ("SYMMETRIC_WEIGHTS",)
CAUSES = ("SYMMETRIC_WEIGHTS",)
CONSEQUENCES = ("COLLAPSED_ACTIVATIONS",)  # identical units give identical (zero) outputs
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Zero only the head (the last layer); keep the hidden layers' random initialisation."
EVIDENCE = ("In the per-layer activation table, read the hidden layers' across-batch std; then "
            "compare the rows of a hidden layer's weight: how many different units does the layer "
            "really have?")
CHANGE = ("Change how the weights are initialised: random (PyTorch's default init), so that the "
          "units start different.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.25)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def zero_layer(module: nn.Module) -> None:
    """Zero weight and bias: a head that starts from uniform predictions."""
    if isinstance(module, nn.Linear):
        nn.init.zeros_(module.weight)
        nn.init.zeros_(module.bias)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (64, 32), "lr": 3e-3, "weight_decay": 1e-2, "batch_size": 64, "epochs": 6}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10], activation=nn.Tanh)
    model.apply(zero_layer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (64, 32), "lr": 3e-3, "weight_decay": 1e-2, "batch_size": 64, "epochs": 6}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10], activation=nn.Tanh)
    zero_layer(model[-1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"],
                                  weight_decay=config["weight_decay"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
