"""The two detections taught by the real-fault benchmark, on broken/healthy pairs over seeds:
random ops active at evaluation however applied, and labels without signal from a training run."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lesson import NetworkDebugger


class Net(nn.Module):
    def __init__(self, functional: str) -> None:
        super().__init__()
        self.functional, self.fc1, self.fc2 = functional, nn.Linear(10, 64), nn.Linear(64, 3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.functional == "training=True":
            h = F.dropout(h, 0.3, training=True)
        elif self.functional == "default":
            h = F.dropout(h, 0.3)
        else:
            h = F.dropout(h, 0.3, training=self.training)
        return self.fc2(h)


def train(model, x, y, xv, yv, steps=60):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            if step % 10 == 9:
                model.eval()
                with torch.no_grad():
                    dbg.record_val_loss(crit(model(xv), yv))
                model.train()
    return {f.code for f in dbg.diagnose()}


def blobs(seed, n=256):
    g = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(3, 10, generator=g)
    y = torch.randint(0, 3, (2 * n,), generator=g)
    x = centres[y] + torch.randn(2 * n, 10, generator=g)
    return x[:n], y[:n], x[n:], y[n:]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("functional", ["training=True", "default"])
def test_functional_dropout_at_eval_is_found(seed, functional):
    torch.manual_seed(seed)
    model = Net(functional)
    x, y, xv, yv = blobs(seed)
    model.eval()
    with torch.no_grad():
        assert not torch.equal(model(xv), model(xv))      # the symptom: eval is not repeatable
    model.train()
    assert "TRAIN_MODE_DURING_EVAL" in train(model, x, y, xv, yv)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_functional_dropout_following_the_mode_is_healthy(seed):
    torch.manual_seed(seed)
    x, y, xv, yv = blobs(seed)
    assert train(Net("self.training"), x, y, xv, yv) == set()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_labels_without_signal_found_from_validation_loss(seed):
    torch.manual_seed(seed)
    x, y, xv, yv = blobs(seed)
    y_bad = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 7))]
    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 3))
    codes = train(model, x, y_bad, xv, yv, steps=800)
    assert "LABELS_SHUFFLED" in codes and "OVERFITTING" not in codes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_real_labels_are_not_called_shuffled(seed):
    torch.manual_seed(seed)
    x, y, xv, yv = blobs(seed)
    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 3))
    assert "LABELS_SHUFFLED" not in train(model, x, y, xv, yv, steps=300)
