"""The training loop feeds the raw readings; only validation gets the standardised ones.

The script standardises the sensor readings (in millimetres, so around a thousand) with the
training split's statistics, as it should, and then builds its DataLoader from the raw split:
one variable name off. Validation sees standardised inputs; training sees inputs a thousand
times larger than PyTorch's default initialisation expects. The first layer's outputs are in
the thousands, the logits saturate, and plain SGD at a rate that suits standardised data
takes huge steps. The standardisation is right there in the script, which is why nobody
looks again; the batch statistics the debugger takes of what actually enters the model do.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below, finite, metric
from broken_models.datasets import Split, blobs, mlp, scores

TITLE = "Standardised inputs computed, raw inputs trained on"
SYMPTOM = ("The first loss is in the hundreds (a fresh 4-class model starts near 1.4), and "
           "training ends at NaN or with validation accuracy far below 90%.")
EXPECTED = ("UNNORMALIZED_INPUTS",)
CAUSES = ("UNNORMALIZED_INPUTS",)
CONSEQUENCES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT", "LR_TOO_HIGH", "NAN_OR_INF", "DEAD_NEURONS")  # the blow-up and its aftermath
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Train on the standardised inputs ((x - mean) / std, with training-split statistics)."
EVIDENCE = ("Set the first loss against ln(10), the loss of a fresh ten-class classifier; then "
            "look at the inputs themselves: their mean and std per feature.")
CHANGE = ("Change the inputs before training: standardise each feature with the training "
          "split's statistics.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 10, nonfinite=True) | below(
    "val_accuracy", 0.9, nonfinite=True)
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.9)


def load_readings(seed: int) -> Split:
    """Ten sensor readings per sample, in millimetres, and which of 4 states it was in."""
    data = blobs(seed, features=10, classes=4, spread=1.0)
    return Split(data.x_train * 1000, data.y_train, data.x_val * 1000, data.y_val)


def standardize(data: Split) -> Split:
    """Both splits scaled with the training split's mean and std, per feature."""
    mean, std = data.x_train.mean(dim=0), data.x_train.std(dim=0)
    return data._replace(x_train=(data.x_train - mean) / std, x_val=(data.x_val - mean) / std)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (32,), "lr": 0.05, "batch_size": 64, "epochs": 25}
    torch.manual_seed(seed)
    data = load_readings(seed)
    scaled = standardize(data)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([10, *config["hidden"], 4])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, scaled, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (32,), "lr": 0.05, "batch_size": 64, "epochs": 25}
    torch.manual_seed(seed)
    data = load_readings(seed)
    scaled = standardize(data)
    loader = DataLoader(TensorDataset(scaled.x_train, scaled.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = mlp([10, *config["hidden"], 4])
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, scaled, debugger.loss_history), debugger)
