"""A frozen layer that keeps moving: `zero_grad(set_to_none=False)` with momentum and decay.

Fine-tuning often freezes the first layers with `requires_grad_(False)` and keeps one optimizer
over all parameters. That is safe while a frozen parameter's `.grad` is None: optimizers skip
such tensors. Here the loop calls `zero_grad(set_to_none=False)`, which fills the old `.grad`
with zeros instead, so the optimizer still steps the "frozen" weights: SGD's momentum buffer
keeps pushing them the way they were going, and weight decay shrinks them every step. The
features the layer learned drift away under a head that was never told.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below, metric
from broken_models.datasets import digits, mlp, scores

TITLE = "Frozen weights keep moving (zero_grad(set_to_none=False))"
SYMPTOM = "The layer frozen with requires_grad_(False) still changes from step to step."
EXPECTED = ("FROZEN_PARAMS_MOVE",)
CAUSES = ("FROZEN_PARAMS_MOVE",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Common PyTorch bugs"
FIX = "Use optimizer.zero_grad() (set_to_none=True, the default): frozen tensors keep .grad None."
EVIDENCE = ("Compare the frozen layer's weights before and after a few steps; the report says "
            "which parameters move without a gradient.")
CHANGE = ("Change how the gradients are cleared, so that frozen parameters keep no gradient for "
          "the optimizer to apply.")
TARGET = "the frozen layer is unchanged after freezing, validation accuracy >= 0.9"
SYMPTOM_CHECK = above(metric("frozen_change", log=True), 1e-3)
TARGET_CHECK = below(metric("frozen_change", log=True), 1e-6) & at_least("val_accuracy", 0.9)


def _frozen_change(before: torch.Tensor, model: nn.Module) -> float:
    return float((model[0].weight.detach() - before).norm() / before.norm())


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(120):
            if step == 40:                        # pretraining done: freeze the first layer
                model[0].requires_grad_(False)
                frozen = model[0].weight.detach().clone()
            optimizer.zero_grad(set_to_none=False)
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    metrics = scores(model, data, debugger.loss_history)
    return Outcome(metrics | {"frozen_change": _frozen_change(frozen, model)}, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-3)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(120):
            if step == 40:                        # pretraining done: freeze the first layer
                model[0].requires_grad_(False)
                frozen = model[0].weight.detach().clone()
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    metrics = scores(model, data, debugger.loss_history)
    return Outcome(metrics | {"frozen_change": _frozen_change(frozen, model)}, debugger)
