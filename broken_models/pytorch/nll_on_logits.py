"""nn.NLLLoss on raw logits.

NLLLoss does not compute a logarithm: it only picks -output[target] and averages, trusting that
the output already holds log-probabilities. Fed raw logits, "minimising the loss" just means
making the target logit as large as possible, without limit: the loss goes negative and keeps
falling forever, the logits grow without bound, and the other classes are ignored. A negative
cross-entropy is impossible, which is the tell.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "NLLLoss on raw logits"
SYMPTOM = "The loss goes negative and keeps falling without bound."
EXPECTED = ("NLL_WITHOUT_LOG_SOFTMAX",)
CAUSES = ("NLL_WITHOUT_LOG_SOFTMAX",)
CONSEQUENCES = ("EXPLODING_ACTIVATIONS",)  # the logits grow without limit: that is the bug at work
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Add nn.LogSoftmax(dim=1) before NLLLoss (or use CrossEntropyLoss on the logits)."
EVIDENCE = ("In the report, read what NLLLoss was fed: the range of its inputs (log-probabilities "
            "are never above 0) and the sign of the loss.")
CHANGE = "Change what the loss is fed: log-probabilities, not raw scores."
TARGET = "validation accuracy >= 0.9 and a non-negative loss"
SYMPTOM_CHECK = below("final_loss", 0)
TARGET_CHECK = at_least("val_accuracy", 0.9) & at_least("final_loss", 0)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
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
