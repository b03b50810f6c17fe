"""The detections taught by the real-fault benchmark, on broken/healthy pairs over seeds: random
ops active at evaluation however applied, labels without signal from a training run, and the
class-order check that must not read a GAN's real/fake targets as sorted data."""
from __future__ import annotations

import math

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


def run(model, x, y, xv, yv, steps=60):
    """Full-batch Adam under the debugger, validation loss recorded every 10 steps (eval mode):
    the codes, the training losses and the validation losses."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    losses, vals = [], []
    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
            if step % 10 == 9:
                model.eval()
                with torch.no_grad():
                    vals.append(crit(model(xv), yv))
                    dbg.record_val_loss(vals[-1])
                model.train()
    return {f.code for f in dbg.diagnose()}, losses, [float(v) for v in vals]


def train(model, x, y, xv, yv, steps=60):
    """The codes only."""
    return run(model, x, y, xv, yv, steps)[0]


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
    model = Net("self.training")
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(xv), model(xv))          # eval is repeatable
    model.train()
    assert train(model, x, y, xv, yv) == set()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_labels_without_signal_found_from_validation_loss(seed):
    torch.manual_seed(seed)
    x, y, xv, yv = blobs(seed)
    y_bad = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 7))]
    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 3))
    codes, losses, vals = run(model, x, y_bad, xv, yv, steps=800)
    chance = math.log(3)
    # the symptom: the training labels are fitted, the validation loss never gets below chance
    assert losses[-1] < 0.5 * losses[0] and min(vals) > 0.9 * chance
    assert "LABELS_SHUFFLED" in codes and "OVERFITTING" not in codes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_real_labels_are_not_called_shuffled(seed):
    torch.manual_seed(seed)
    x, y, xv, yv = blobs(seed)
    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 3))
    codes, _, vals = run(model, x, y, xv, yv, steps=300)
    assert min(vals) < 0.5 * math.log(3)          # real labels: validation well below chance
    assert codes == set()                          # no finding at all on the healthy run


# -- class order: a GAN's constant real/fake targets are not data sorted by class ---------------
def gan_codes(seed: int, steps: int = 120) -> set[str]:
    """A small GAN, the generator watched with the loss it is given; the discriminator's own
    loss module sees all-real, then all-fake targets, as every GAN tutorial builds them."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    crit, bce = nn.BCEWithLogitsLoss(), nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    with NetworkDebugger(G, opt_g, crit) as dbg:
        for _ in range(steps):
            z = torch.randn(64, 4, generator=g)
            real = torch.randn(64, 2, generator=g) * 0.3 + torch.tensor([2.0, -1.0])
            fake = G(z)
            opt_d.zero_grad()
            (bce(D(real), ones) + bce(D(fake.detach()), zeros)).backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = crit(D(fake), ones)
            g_loss.backward()
            opt_g.step()
            dbg.record_loss(g_loss.detach())
        return {f.code for f in dbg.diagnose()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gan_targets_are_not_unshuffled_batches(seed):
    assert "UNSHUFFLED_BATCHES" not in gan_codes(seed)


def train_functional_loss(x, y, seed: int, steps: int = 48) -> tuple[set[str], float]:
    """Cross-entropy through F.cross_entropy (the debugger's criterion never called), batches
    taken in stored order for two epochs; the codes and the share of all samples predicted as
    the class of the last batch."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, int(y.max()) + 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with NetworkDebugger(model, opt, nn.CrossEntropyLoss()) as dbg:
        for step in range(steps):
            idx = torch.arange(step * 32, (step + 1) * 32) % len(x)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
        codes = {f.code for f in dbg.diagnose()}
    with torch.no_grad():
        drift = float((model(x).argmax(1) == y[idx][-1]).float().mean())
    return codes, drift


@pytest.mark.parametrize("seed", [0, 1])
def test_sorted_data_through_a_functional_loss_is_still_found(seed):
    gen = torch.Generator().manual_seed(300 + seed)
    x = torch.randn(768, 8, generator=gen)
    y = x[:, :3].argmax(1)
    order = y.argsort()
    broken, drift = train_functional_loss(x[order], y[order], seed)
    fixed, fixed_drift = train_functional_loss(x, y, seed)
    assert drift > fixed_drift + 0.15     # the symptom: pulled towards the class seen last
    assert "UNSHUFFLED_BATCHES" in broken
    assert "UNSHUFFLED_BATCHES" not in fixed
