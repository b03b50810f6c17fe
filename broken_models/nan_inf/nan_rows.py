"""Empty scans, normalised by their brightest pixel: 0 / 0 = NaN rows in the training data.

Each scan is scaled to its own brightest pixel (a contrast normalisation), which is sound for
every scan that has ink. The scanner also fed a few empty pages into the training export, and
an empty page's brightest pixel is 0: the normalisation writes NaN into every pixel of those
rows. One NaN input gives one NaN output, and a mean over the batch makes the whole loss NaN:
the run is dead from the first step, and the gradient that comes back turns every weight into
NaN too. No amount of learning-rate tuning helps; the fix is in the data. Check
torch.isfinite(x).all() once, before training, and look at the rows it flags.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, not_finite
from broken_models.datasets import Split, digits, mlp, scores

TITLE = "Empty scans normalised by their maximum: NaN rows in the training data"
SYMPTOM = "The loss is nan from the very first step."
EXPECTED = ("NONFINITE_INPUT",)
CAUSES = ("NONFINITE_INPUT",)
CONSEQUENCES = ("NAN_OR_INF",)  # the NaN loss it produces: what the debugger sees
TOOL = "data_validator"
LESSON = "Symptom 3: NaN or Inf in the loss"
FIX = "Drop the empty scans (brightest pixel 0) before normalising each scan by its maximum."
EVIDENCE = ("Before any training, read validate_data's findings: how many input rows hold NaN or "
            "Inf, and which ones?")
CHANGE = "Change the data before training: drop or impute the rows that are not finite."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = not_finite("first_loss")
TARGET_CHECK = at_least("val_accuracy", 0.9)


def load_scans(seed: int) -> Split:
    """Raw scans (grey levels 0-16) and their digits, as the scanner exported them: its feed
    put an empty page before every 40th scan of the training export."""
    data = digits(seed, standardize=False)
    x = data.x_train.clone()
    x[torch.arange(seed % 40, len(x), 40)] = 0.0
    return data._replace(x_train=x)


def contrast(x: torch.Tensor) -> torch.Tensor:
    """Each scan scaled to its own brightest pixel: values in [0, 1]."""
    return x / x.amax(dim=1, keepdim=True)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    config = {"hidden": (64,), "lr": 1e-2, "steps": 100}
    torch.manual_seed(seed)
    data = load_scans(seed)
    data = data._replace(x_train=contrast(data.x_train), x_val=contrast(data.x_val))
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, validate_data

    config = {"hidden": (64,), "lr": 1e-2, "steps": 100}
    torch.manual_seed(seed)
    data = load_scans(seed)
    inked = data.x_train.amax(dim=1) > 0
    data = data._replace(x_train=data.x_train[inked], y_train=data.y_train[inked])
    data = data._replace(x_train=contrast(data.x_train), x_val=contrast(data.x_val))
    findings = validate_data(data.x_train, data.y_train, data.x_val, data.y_val)
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger, findings)
