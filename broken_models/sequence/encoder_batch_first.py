"""A transformer encoder layer fed (batch, time, features) without batch_first=True.

nn.TransformerEncoderLayer, nn.MultiheadAttention, nn.GRU and nn.LSTM read their input as
(time, batch, features) unless told `batch_first=True`. Given a (batch, time, features) tensor,
the layer attends along the first axis, which holds the batch: at every time step each window
attends to the other windows of the batch, and none of them to its own past. The shapes agree,
the loss falls (each window still reaches the classifier through the residual path), and the
validation accuracy looks almost reasonable. But a prediction depends on which other windows
share its batch: scored one at a time, the same validation windows get other answers.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below
from broken_models.datasets import scores, sequences
from broken_models.tokens import answers_compared

TITLE = "A transformer layer without batch_first on (batch, time, features) input"
SYMPTOM = ("Scored one window at a time, the validation windows get other class probabilities "
           "than when scored together in one batch (moved by a few percent on average), and some "
           "get another answer.")
EXPECTED = ("BATCH_MIXING",)
CAUSES = ("BATCH_MIXING",)
CONSEQUENCES = ()
TOOL = "batch_independence"
LESSON = "Sequence models and language models"
FIX = ("Build the layer with batch_first=True (or transpose the input to (time, batch, "
       "features) and back).")
EVIDENCE = ("Read `outcome.findings`: does one window's output change when the other windows of "
            "its batch change? Then compare the shape of the tensor the encoder layer is given "
            "with the axis order it reads by default.")
CHANGE = ("Change how the encoder layer is told which axis holds the batch.")
TARGET = ("validation accuracy >= 0.9, and the same predictions one window at a time as in a "
          "batch (class probabilities moved by under 1e-4)")
SYMPTOM_CHECK = above("val_answers_moved", 1e-3)
TARGET_CHECK = at_least("val_accuracy", 0.9) & below("val_answers_moved", 1e-4)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_batch_independence

    features, window = 4, 16                 # sensor channels, readings per window
    d_model, heads = 32, 4
    steps, batch_size, lr = 150, 64, 3e-3

    torch.manual_seed(seed)
    data = sequences(seed, n_train=2048, n_val=1024, steps=window, features=features,
                     radius=0.8)
    g = torch.Generator().manual_seed(seed)

    class SensorClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.project = nn.Linear(features, d_model)
            self.encoder = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model,
                                                      dropout=0.0)
            self.head = nn.Linear(d_model, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:   # x: (batch, time, features)
            return self.head(self.encoder(self.project(x)).mean(dim=1))

    model = SensorClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
    model.eval()
    metrics = scores(model, data, debugger.loss_history)
    with torch.no_grad():
        alone = torch.cat([model(x[None]) for x in data.x_val[:256]])
        compared = answers_compared(model(data.x_val[:256]), alone)
    metrics["val_answers_changed"], metrics["val_answers_moved"] = compared.values()
    findings = check_batch_independence(model, data.x_val[:8])
    return Outcome(metrics, debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_batch_independence

    features, window = 4, 16                 # sensor channels, readings per window
    d_model, heads = 32, 4
    steps, batch_size, lr = 150, 64, 3e-3

    torch.manual_seed(seed)
    data = sequences(seed, n_train=2048, n_val=1024, steps=window, features=features,
                     radius=0.8)
    g = torch.Generator().manual_seed(seed)

    class SensorClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.project = nn.Linear(features, d_model)
            self.encoder = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model,
                                                      dropout=0.0, batch_first=True)
            self.head = nn.Linear(d_model, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:   # x: (batch, time, features)
            return self.head(self.encoder(self.project(x)).mean(dim=1))

    model = SensorClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
    model.eval()
    metrics = scores(model, data, debugger.loss_history)
    with torch.no_grad():
        alone = torch.cat([model(x[None]) for x in data.x_val[:256]])
        compared = answers_compared(model(data.x_val[:256]), alone)
    metrics["val_answers_changed"], metrics["val_answers_moved"] = compared.values()
    findings = check_batch_independence(model, data.x_val[:8])
    return Outcome(metrics, debugger, findings)
