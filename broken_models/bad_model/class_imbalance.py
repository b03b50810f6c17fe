"""A 20:1 class ratio: accuracy rewards ignoring the rare class.

Fraud, disease, defects: the interesting class is the rare one. With 20 negatives for every
positive, a model that always says "negative" is 95% accurate on data like its training set,
and gradient descent finds that shortcut first. Look at per-class recall (or balanced accuracy)
rather than accuracy, and re-balance training: resample the rare class, or weight the loss.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below
from broken_models.datasets import Split

TITLE = "A 20:1 class imbalance"
SYMPTOM = "Training accuracy is about 96%, yet the model misses half or more of the rare class."
EXPECTED = ("CLASS_IMBALANCE",)
CAUSES = ("CLASS_IMBALANCE",)
CONSEQUENCES = ()
TOOL = "data_validator"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = "Re-balance the training set (here: repeat the rare class 20 times) or weight the loss."
EVIDENCE = "Read validate_data's class counts, then each class's recall, not only the accuracy."
CHANGE = "Change what training sees: re-balance the classes, or weight the loss by class."
TARGET = "recall of the rare class >= 0.75 and balanced accuracy >= 0.8"
SYMPTOM_CHECK = above("train_accuracy", 0.9) & below("rare_recall", 0.6)
TARGET_CHECK = at_least("rare_recall", 0.75) & at_least("balanced_accuracy", 0.8)


def screening(seed: int, common: int = 4000, rare: int = 200) -> Split:
    """Two overlapping Gaussian classes, 20:1 in training; the audit split is balanced."""
    g = torch.Generator().manual_seed(seed)
    shift = torch.full((8,), 0.8)

    def draw(n0: int, n1: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([torch.randn(n0, 8, generator=g) - shift / 2,
                       torch.randn(n1, 8, generator=g) + shift / 2])
        return x, torch.cat([torch.zeros(n0, dtype=torch.long), torch.ones(n1, dtype=torch.long)])

    return Split(*draw(common, rare), *draw(250, 250))


@torch.no_grad()
def screening_scores(model: nn.Module, data: Split, losses: list[float]) -> dict:
    """Accuracy on the (imbalanced) training set, and per-class recall on the balanced audit."""
    pred = model(data.x_val).argmax(dim=1)
    common, rare = [(pred[data.y_val == c] == c).float().mean().item() for c in (0, 1)]
    train = (model(data.x_train).argmax(dim=1) == data.y_train).float().mean().item()
    return {"losses": list(losses), "first_loss": losses[0], "final_loss": losses[-1],
            "train_accuracy": train, "rare_recall": rare, "balanced_accuracy": (common + rare) / 2}


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = screening(seed)
    x, y = data.x_train, data.y_train
    findings = validate_data(x, y, data.x_val, data.y_val)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(screening_scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    torch.manual_seed(seed)
    data = screening(seed)
    rare_rows = torch.nonzero(data.y_train == 1).squeeze(1).repeat(19)
    x, y = torch.cat([data.x_train, data.x_train[rare_rows]]), torch.cat([data.y_train, data.y_train[rare_rows]])
    findings = validate_data(x, y, data.x_val, data.y_val)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(screening_scores(model, data, debugger.loss_history), debugger, findings)
