"""A debugging subset left on: a large network trained on 50 of its 1000 images.

`max_train_samples` is the switch for quick iterations on a slice of the data (Hugging Face's
example scripts have the same one); it was left at 50. Twenty-five thousand parameters can
memorise 50 images, and they do: training loss goes to 0 while the validation loss, after a
brief fall, turns and climbs: each further step fits noise in the 50 images, not the digits.
What ends the climb here: more data (the fix below, all 1000 images, and the best), weight
decay (1e-3 keeps the validation loss flat), or stopping once the validation loss rises.
Dropout does not (p = 0.3 or 0.5 after each hidden layer: the target is missed on 16 seeds
of 16), nor does accuracy move much: with 50 images the network fits them whatever is done,
what overfitting costs here is calibration, a validation loss that climbs while its accuracy
holds.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import Quantity, above, at_least, at_most, difference
from broken_models.datasets import digits, mlp, scores
from lesson.debugger.rules import Thresholds, overfit_rise

TITLE = "A debugging subset of 50 training images left on"
SYMPTOM = ("Training accuracy reaches 100% while validation accuracy stays 15 to 35 points lower; "
           "the validation loss falls for the first 10 to 20 steps, then climbs.")
EXPECTED = ("OVERFITTING",)
CAUSES = ("OVERFITTING",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Symptom 2: the loss goes down but the model is bad"
FIX = ("Train on more data (here all 1000 images, not a subset of 50); weight decay, or stopping once the "
       "validation loss rises, also end the climb.")
CHANGE = ("Regularise, or stop in time: more training data, weight decay, or stopping the training "
          "once the validation loss rises above its best.")
EVIDENCE = ("Put the two curves side by side: debugger.loss_history and "
            "debugger.val_loss_history (one validation loss every 10 steps). Where is the "
            "validation loss lowest, and what does it do while the training loss keeps falling?")
TARGET = ("the validation loss does not keep climbing past its lowest (no sustained rise) and "
          "validation accuracy >= 0.6")
REAL_FIXES = ("fewer_steps", "weight_decay", "dropout")  # stopping early and regularising fix it too
SYMPTOM_CHECK = above(difference("train_accuracy", "val_accuracy"), 0.1)


def _climb(m: dict) -> float:
    """The validation loss's last value over its lowest, minus 1, when the climb is one the
    debugger's rule counts (sustained, large enough: lesson.debugger.rules.overfit_rise); 0
    when it is not."""
    rise = overfit_rise(list(m["val_losses"]), Thresholds())
    return 0.0 if rise is None else rise["relative_rise"]


TARGET_CHECK = (at_most(Quantity("sustained validation-loss climb", _climb), 0.025)
                & at_least("val_accuracy", 0.6))


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (128, 128), "lr": 5e-3, "steps": 200, "batch_size": 64,
              "eval_every": 10, "max_train_samples": 50}
    torch.manual_seed(seed)
    data = digits(seed)
    limit = config["max_train_samples"]
    data = data._replace(x_train=data.x_train[:limit], y_train=data.y_train[:limit])
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            rows = torch.randint(len(data.y_train), (config["batch_size"],))
            loss = criterion(model(data.x_train[rows]), data.y_train[rows])
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % config["eval_every"] == config["eval_every"] - 1:
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
    metrics = scores(model, data, debugger.loss_history) | {"val_losses": debugger.val_loss_history}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"hidden": (128, 128), "lr": 5e-3, "steps": 200, "batch_size": 64,
              "eval_every": 10, "max_train_samples": None}
    torch.manual_seed(seed)
    data = digits(seed)
    limit = config["max_train_samples"]
    data = data._replace(x_train=data.x_train[:limit], y_train=data.y_train[:limit])
    model = mlp([64, *config["hidden"], 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            rows = torch.randint(len(data.y_train), (config["batch_size"],))
            loss = criterion(model(data.x_train[rows]), data.y_train[rows])
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
            if step % config["eval_every"] == config["eval_every"] - 1:
                with torch.no_grad():
                    debugger.record_val_loss(criterion(model(data.x_val), data.y_val).item())
    metrics = scores(model, data, debugger.loss_history) | {"val_losses": debugger.val_loss_history}
    return Outcome(metrics, debugger)
