"""`model.train()` not restored after a validation pass.

The validation code correctly switches to `model.eval()`, and nothing ever switches back. From
the first validation on, training runs with dropout off: the regularisation you chose is gone
without a trace, the training loss falls several times lower than dropout allows, and the model memorises. With
batch norm it is worse: the running statistics freeze at whatever they were. Put model.train()
at the top of every training epoch, not just before the first.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below, tail_mean
from broken_models.datasets import digits, scores

TITLE = "model.train() not restored after validation"
SYMPTOM = "Dropout has no effect: the training loss ends 4x lower than dropout allows, below 0.02."
EXPECTED = ("EVAL_MODE_DURING_TRAINING",)
CAUSES = ("EVAL_MODE_DURING_TRAINING",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Call model.train() after each validation pass (at the top of every training epoch)."
EVIDENCE = ("The report says which mode the model was in while it trained; set the training loss "
            "against what dropout should allow.")
CHANGE = ("Change the training loop: switch the model back to training mode after each "
          "validation pass.")
TARGET = "validation accuracy >= 0.9 with dropout active (training loss stays above 0.02)"
SYMPTOM_CHECK = below(tail_mean("losses", 10), 0.02)
TARGET_CHECK = at_least("val_accuracy", 0.9) & at_least(tail_mean("losses", 10), 0.02)


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
                model.eval()
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
    model.eval()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


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
    return Outcome(scores(model, data, debugger.loss_history), debugger)
