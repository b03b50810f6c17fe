"""Dead ReLUs from an initialisation with a negative bias.

A ReLU passes a gradient only where its input is positive. The init helper below copies a
transformer recipe's small truncated-normal weights (std 0.02) and adds a bias of -0.5, meant
to keep the activations sparse. With weights that small, every unit's input is the bias plus a
little noise, about -0.5 +- 0.16: below 0 for every sample. The first hidden layer outputs 0
everywhere, so the second sees only its bias and is dead too: no signal forward, no gradient
backward, and no way to recover. Only the output bias learns, so the loss stays at chance.
The lesson's check: the fraction of units that are 0 for the whole batch after each ReLU;
above 50% something is wrong.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import above, at_least, tail_mean
from broken_models.datasets import digits, mlp, scores

TITLE = "Dead ReLUs from an initial bias of -0.5 under small weights"
SYMPTOM = ("The loss starts at 2.303 and its last ten values average 2.30 (ln 10): it never "
           "moves; accuracy stays near 10%.")
EXPECTED = ("DEAD_NEURONS",)
CAUSES = ("DEAD_NEURONS",)
CONSEQUENCES = ("COLLAPSED_ACTIVATIONS",)  # the layers after the dead ones output constants
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Initialise the biases at 0, not -0.5: with weights this small nothing reaches above it."
EVIDENCE = ("In the per-layer activation table, read the `dead=` column: which layer's units "
            "output 0 for every sample, and since which step (the finding's first step)?")
CHANGE = ("Change how the layers are initialised: PyTorch's default init, or biases that "
          "start at zero.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = above(tail_mean("losses", 10), 2.2)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def init_weights(module: nn.Module, std: float, bias: float) -> None:
    """Truncated-normal weights and a constant bias for every linear layer."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        nn.init.constant_(module.bias, bias)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {
        "hidden": (128, 64),
        "init_std": 0.02,
        "init_bias": -0.5,
        "lr": 3e-3,
        "weight_decay": 0.05,
        "batch_size": 64,
        "epochs": 8,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    model.apply(lambda m: init_weights(m, config["init_std"], config["init_bias"]))
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

    config = {
        "hidden": (128, 64),
        "init_std": 0.02,
        "init_bias": 0.0,
        "lr": 3e-3,
        "weight_decay": 0.05,
        "batch_size": 64,
        "epochs": 8,
    }
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([64, *config["hidden"], 10])
    model.apply(lambda m: init_weights(m, config["init_std"], config["init_bias"]))
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
