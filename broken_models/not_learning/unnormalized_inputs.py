"""Inputs 1000 times larger than the network expects.

The same sensor readings, logged in millimetres instead of metres. PyTorch's default
initialisation assumes inputs of about unit scale; at 1000x the first layer's outputs are in
the thousands, the logits saturate, and plain SGD at a learning rate that suits standardised
data takes huge steps. Standardise every feature with the training split's mean and standard
deviation before anything else.
"""
from __future__ import annotations


import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, finite, metric
from broken_models.datasets import blobs, mlp, scores

TITLE = "Inputs scaled by 1000"
SYMPTOM = "The first loss is in the hundreds and training ends at NaN or far from the target."
EXPECTED = ("UNNORMALIZED_INPUTS",)
CAUSES = ("UNNORMALIZED_INPUTS",)
CONSEQUENCES = ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT", "LR_TOO_HIGH", "NAN_OR_INF", "DEAD_NEURONS")  # the blow-up and its aftermath
TOOL = "monitor"
LESSON = "Symptom 1: the loss does not go down"
FIX = "Standardise the inputs ((x - mean) / std, with training-split statistics)."
EVIDENCE = ("Set the first loss against ln(10), the loss of a fresh ten-class classifier; then "
            "look at the inputs themselves: their mean and std per feature.")
CHANGE = ("Change the inputs before training: standardise each feature with the training "
          "split's statistics.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 10, nonfinite=True) | below("val_accuracy", 0.9, nonfinite=True)
TARGET_CHECK = finite("final_loss") & at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=4, spread=1.0)
    data = data._replace(x_train=data.x_train * 1000, x_val=data.x_val * 1000)  # mm, not m
    model = mlp([10, 32, 4])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = blobs(seed, features=10, classes=4, spread=1.0)
    model = mlp([10, 32, 4])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
