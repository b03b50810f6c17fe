"""The optimizer was built before the classification head was replaced.

Transfer learning in three lines: freeze the pretrained body, swap the head for one with our
number of classes, train. Here the optimizer is created one line too early, over the parameters
of the *old* head. The new head gets gradients on every backward pass, but no optimizer ever
applies them, and the frozen body does not train by design: nothing learns. An optimizer holds
the tensors it was given when it was built, not "whatever the model has now"; even
`optimizer.zero_grad()` skips the new head, whose gradient piles up step after step.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import digits, scores

TITLE = "Optimizer built before the head was replaced"
SYMPTOM = ("The loss moves only with the batches and validation accuracy ends between 5% and "
           "25%, although every step runs backward() and step().")
EXPECTED = ("PARAMS_NOT_UPDATED",)
CAUSES = ("PARAMS_NOT_UPDATED",)
CONSEQUENCES = ("MISSING_ZERO_GRAD", "EXPLODING_GRADIENT")  # optimizer.zero_grad() never clears the new head
TOOL = "monitor"
LESSON = "4. Overfit one batch"
FIX = "Build the optimizer after the model is final (after replacing the head)."
EVIDENCE = ("Read which layer the report says gets gradients that no optimizer step applies, then "
            "look at when the optimizer was built, against when that layer was made.")
CHANGE = "Change the order of the set-up: build the optimizer once the model is final."
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.3)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def load_backbone() -> nn.Sequential:
    """A feature extractor pretrained elsewhere, with its 1000-class head (here: fixed random
    ReLU features, which serve the same purpose)."""
    return nn.Sequential(nn.Sequential(nn.Linear(64, 256), nn.ReLU()), nn.Linear(256, 1000))


def build_optimizer(model: nn.Module, config: dict) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters, without weight decay on biases."""
    decay = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith("bias")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": config["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}], lr=config["lr"])


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"classes": 10, "lr": 1e-2, "weight_decay": 1e-4, "batch_size": 100, "epochs": 6}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = load_backbone()
    model[0].requires_grad_(False)  # fine-tune the head only
    optimizer = build_optimizer(model, config)
    model[1] = nn.Linear(256, config["classes"])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    config = {"classes": 10, "lr": 1e-2, "weight_decay": 1e-4, "batch_size": 100, "epochs": 6}
    torch.manual_seed(seed)
    data = digits(seed)
    loader = DataLoader(TensorDataset(data.x_train, data.y_train),
                        batch_size=config["batch_size"], shuffle=True)
    model = load_backbone()
    model[0].requires_grad_(False)  # fine-tune the head only
    model[1] = nn.Linear(256, config["classes"])
    optimizer = build_optimizer(model, config)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(config["epochs"]):
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
