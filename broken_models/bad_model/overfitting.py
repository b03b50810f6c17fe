"""A large network on fifty examples, without regularisation.

Twenty-five thousand parameters and 50 training images: the network can memorise every image,
and it does. Training loss goes to 0 while the validation loss, after a brief fall, turns and
climbs: each further step fits noise in the 50 images, not the digits. The remedies, in the
order the lesson lists them: more data, dropout, weight decay, early stopping, augmentation.
Here the fix is the first and best one: twenty times more data.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, difference
from broken_models.datasets import digits, mlp, scores

TITLE = "A large model on little data"
SYMPTOM = "Training accuracy is 100%, validation accuracy over 10 points lower; validation loss climbs."
EXPECTED = ("OVERFITTING",)
CAUSES = ("OVERFITTING",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Train on more data (here 1000 images instead of 50); add weight decay or stop early."
TARGET = "validation accuracy >= 0.9"
REAL_FIXES = ("fewer_steps", "weight_decay", "dropout")  # stopping early and regularising fix it too
SYMPTOM_CHECK = above(difference("train_accuracy", "val_accuracy"), 0.1)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed, n_train=50)
    model = mlp([64, 128, 128, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(200):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % 10 == 9:
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
    metrics = scores(model, data, debugger.loss_history) | {"val_losses": debugger.val_loss_history}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed, n_train=1000)
    model = mlp([64, 128, 128, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(200):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % 10 == 9:
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
    metrics = scores(model, data, debugger.loss_history) | {"val_losses": debugger.val_loss_history}
    return Outcome(metrics, debugger)
