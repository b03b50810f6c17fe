"""A residual block that builds its LayerNorm and never calls it.

A residual block returns x + f(x). With f initialised the standard way for ReLUs (Kaiming),
f(x) has the same scale as x, so a block without normalisation doubles the variance of the
signal: after 30 blocks the activations are some 30,000 times larger than the input, and so
are the logits and the loss. Pre-norm blocks (x + f(norm(x)), as in transformers) let the sum
grow slowly instead of geometrically. The block below has its `norm` (it is in `__init__`, it
shows in `print(model)`, it has parameters), but `forward` skips it: reading the class top to
bottom, the normalisation looks present. The activation statistics, block after block, say
otherwise.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, metric
from broken_models.datasets import blobs, scores

TITLE = "A residual block whose LayerNorm is never called"
SYMPTOM = ("The first loss is in the millions (a fresh 4-class model starts near 1.4), it ends "
           "in the thousands, and accuracy ends between 25% and 45% on 4 classes.")
EXPECTED = ("EXPLODING_ACTIVATIONS",)
CAUSES = ("EXPLODING_ACTIVATIONS", "NO_GRADIENT")  # the unused norm gets no gradient: it names the bug too
CONSEQUENCES = ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH", "DEAD_NEURONS")  # the blow-up and what it leaves
TOOL = "monitor"
LESSON = "2. Activation statistics"
FIX = "Call the block's LayerNorm in forward, on the input of its branch: x + f(norm(x))."
EVIDENCE = ("In the per-layer activation table, follow the std block after block through the "
            "residual blocks: how does it grow, at the first step already, although each layer's "
            "weights look ordinary?")
CHANGE = ("Change the blocks' forward pass so that every residual branch gets normalised input: "
          "use the normalisation each block builds.")
TARGET = "validation accuracy >= 0.85"
SYMPTOM_CHECK = at_least(metric("first_loss", log=True), 100, nonfinite=True)
TARGET_CHECK = at_least("val_accuracy", 0.85)


def he_init(module: nn.Module) -> None:
    """Kaiming-normal weights for the layers that feed a ReLU, as in the ResNet paper."""
    if isinstance(module, nn.Linear):
        nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(module.bias)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    class Block(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.f = nn.Sequential(nn.Linear(width, width), nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.f(x)

    config = {"width": 32, "blocks": 30, "lr": 0.01, "clip_norm": 1.0, "steps": 80}
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5)
    model = nn.Sequential(nn.Linear(16, config["width"]),
                          *[Block(config["width"]) for _ in range(config["blocks"])],
                          nn.Linear(config["width"], 4))
    model.apply(he_init)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config["clip_norm"])
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    class Block(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.f = nn.Sequential(nn.Linear(width, width), nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.f(self.norm(x))

    config = {"width": 32, "blocks": 30, "lr": 0.01, "clip_norm": 1.0, "steps": 80}
    torch.manual_seed(seed)
    data = blobs(seed, n_train=1024, features=16, classes=4, spread=1.5)
    model = nn.Sequential(nn.Linear(16, config["width"]),
                          *[Block(config["width"]) for _ in range(config["blocks"])],
                          nn.Linear(config["width"], 4))
    model.apply(he_init)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(config["steps"]):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config["clip_norm"])
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
