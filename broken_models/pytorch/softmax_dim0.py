"""Log-softmax over dim 0: the batch, not the classes.

For an (N, C) output, `dim=0` normalises each class's column across the samples of the batch,
so every "probability" says how this sample compares with the others in the batch, not how
this class compares with the other classes. The loss still falls (it rewards a sample for
out-scoring its batch-mates on its own class), but the numbers are not class probabilities,
predictions depend on which samples share the batch, and accuracy suffers.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below
from broken_models.datasets import digits, scores

TITLE = "Softmax over the batch dimension (dim=0)"
SYMPTOM = "The loss never gets below about 4.7, although the accuracy looks fine."
EXPECTED = ("SOFTMAX_WRONG_DIM",)
CAUSES = ("SOFTMAX_WRONG_DIM",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Normalise over the classes: nn.LogSoftmax(dim=1) (or dim=-1)."
EVIDENCE = ("In the report, read over which dimension the softmax before the loss normalised, and "
            "set the loss against what the accuracy suggests.")
CHANGE = "Change the dimension the softmax normalises over."
TARGET = "validation accuracy >= 0.9 and a training loss below 0.5"
SYMPTOM_CHECK = above("final_loss", 1.0)
TARGET_CHECK = at_least("val_accuracy", 0.9) & below("final_loss", 0.5)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10), nn.LogSoftmax(dim=0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.NLLLoss()
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
    data = digits(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10), nn.LogSoftmax(dim=1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.NLLLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
