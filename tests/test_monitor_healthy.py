"""No false alarms: correct networks, several architectures, optimizers and seeds, give an
empty diagnosis (and the lesson's checks say HEALTHY)."""
from __future__ import annotations

import itertools

import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from lesson.debugger.monitor import NetworkDebugger

_digits = load_digits()
X = torch.tensor(_digits.data, dtype=torch.float32)
X = (X - X.mean(0)) / (X.std(0) + 1e-6)
Y = torch.tensor(_digits.target)
X_TRAIN, Y_TRAIN, X_VAL, Y_VAL = X[:1400], Y[:1400], X[1400:], Y[1400:]


def make(arch: str) -> nn.Module:
    if arch == "mlp":
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                             nn.Linear(64, 10))
    if arch == "mlp_gelu_dropout":
        return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Dropout(0.2), nn.Linear(128, 64),
                             nn.Tanh(), nn.Linear(64, 10))
    if arch == "cnn_bn":
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1),
                             nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                             nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 16, 10))
    raise ValueError(arch)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2),
}


def train_healthy(arch: str, opt_name: str, seed: int, every: int = 1, steps: int = 66):
    torch.manual_seed(seed)
    model = make(arch)
    opt = OPTIMIZERS[opt_name](model.parameters())
    crit = nn.CrossEntropyLoss()
    with NetworkDebugger(model, opt, crit, every=every) as dbg:
        order = torch.randperm(len(X_TRAIN))
        for step in range(steps):
            idx = order[(step * 64) % 1344:(step * 64) % 1344 + 64]
            model.train()
            opt.zero_grad()
            loss = crit(model(X_TRAIN[idx]), Y_TRAIN[idx])
            dbg.record_loss(loss.detach())
            loss.backward()
            opt.step()
            if step % 22 == 21:
                model.eval()
                with torch.no_grad():
                    dbg.record_val_loss(crit(model(X_VAL), Y_VAL))
        return dbg, dbg.diagnose()


GRID = list(itertools.product(["mlp", "mlp_gelu_dropout", "cnn_bn"], OPTIMIZERS))


@pytest.mark.parametrize("arch,opt_name", GRID[:4])
def test_healthy_mlp_is_clean(arch, opt_name):
    dbg, found = train_healthy(arch, opt_name, seed=0)
    assert found == [], [str(f) for f in found]
    assert dbg.loss_history[-1] < dbg.loss_history[0] * 0.7      # it does learn
    assert dbg.check_activations() == ["HEALTHY"] and dbg.check_gradients() == ["HEALTHY"]


@pytest.mark.slow
@pytest.mark.parametrize("arch,opt_name", GRID[4:])
@pytest.mark.parametrize("seed", [1])
def test_healthy_grid_is_clean(arch, opt_name, seed):
    dbg, found = train_healthy(arch, opt_name, seed=seed)
    assert found == [], [str(f) for f in found]
    assert dbg.loss_history[-1] < dbg.loss_history[0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 7))
def test_healthy_seeds_never_dead_neurons(seed):
    """The lesson's healthy demo net was flagged DEAD_NEURONS in 5-7 of 10 seeds."""
    torch.manual_seed(42)
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    with NetworkDebugger(model) as dbg:
        for _ in range(50):
            opt.zero_grad()
            loss = crit(model(x), y)
            dbg.record_loss(loss.item())
            loss.backward()
            opt.step()
    assert dbg.activation_stats["1"]["fraction_zero"] > 0.2    # many zeros are normal ...
    assert dbg.diagnose() == []                               # ... and not dead units
    assert dbg.check_loss_health() == "HEALTHY"


def test_flat_converged_loss_is_not_oscillating():
    from lesson.debugger.rules import loss_verdict
    converged = [2.3 * 0.5 ** i for i in range(20)] + [1e-6 + 1e-9 * (-1) ** i for i in range(30)]
    assert loss_verdict(converged) == "HEALTHY"
    plateau = [0.5] * 5 + [0.4 + 1e-7 * (-1) ** i for i in range(30)]
    assert loss_verdict(plateau) == "HEALTHY"
    wild = [1.0, 3.0] * 10 + [1.0, 3.5, 0.9, 3.2, 1.1, 3.0, 0.8, 3.1, 1.2, 2.9]
    assert loss_verdict(wild) in {"OSCILLATING", "NOT_DECREASING"}
