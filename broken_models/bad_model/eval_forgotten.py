"""`model.eval()` forgotten before evaluation.

Dropout is a training-time device: it silences a random half of the units on every pass. Left
on during evaluation, every validation score comes from a different random half-network, so
the numbers are noisy and biased low, and evaluating the same model twice gives two different
answers: some images get another class the second time. (Batch norm would use the statistics
of each evaluation batch instead of the running ones.) Call model.eval() before evaluating, inside torch.no_grad(), and model.train() after.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most
from broken_models.datasets import digits, scores

TITLE = "model.eval() forgotten before evaluation"
SYMPTOM = "Evaluating the same model twice gives some validation images two different classes."
EXPECTED = ("TRAIN_MODE_DURING_EVAL",)
CAUSES = ("TRAIN_MODE_DURING_EVAL",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Call model.eval() before every evaluation (and model.train() before training resumes)."
EVIDENCE = ("Evaluate the same model twice on the validation set: do the answers agree? The "
            "report says which mode the model was in during evaluation.")
CHANGE = "Change the evaluation: switch the model to evaluation mode around it."
TARGET = "validation accuracy >= 0.9, the same answers on every evaluation"
SYMPTOM_CHECK = above("val_answers_changed", 0)
TARGET_CHECK = at_least("val_accuracy", 0.9) & at_most("val_answers_changed", 0)


@torch.no_grad()
def answers_changed(model: nn.Module, x: torch.Tensor) -> float:
    """Share of inputs whose predicted class differs between two evaluations of the same model
    (two accuracies can agree by chance while the answers behind them differ)."""
    return (model(x).argmax(dim=1) != model(x).argmax(dim=1)).float().mean().item()


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed, n_train=300)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % 10 == 9:
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
                model.train()
    metrics = scores(model, data, debugger.loss_history)
    metrics["val_answers_changed"] = answers_changed(model, data.x_val)
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed, n_train=300)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % 10 == 9:
                model.eval()
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
                model.train()
    model.eval()
    metrics = scores(model, data, debugger.loss_history)
    metrics["val_answers_changed"] = answers_changed(model, data.x_val)
    return Outcome(metrics, debugger)
