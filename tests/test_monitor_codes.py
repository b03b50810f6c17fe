"""Every diagnosis code of issue 2, produced end to end: a broken network trains under
NetworkDebugger, the test shows the symptom itself, and diagnose() names the bug."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lesson.debugger.monitor import NetworkDebugger


def data(n: int = 256, d: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).long()


def mlp(*widths: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def train(model: nn.Module, opt: torch.optim.Optimizer | None, x: torch.Tensor, y: torch.Tensor,
          criterion=None, steps: int = 30, batch: int = 64, zero_grad: bool = True,
          pass_optimizer: bool = True, scheduler=None, **kw) -> tuple[NetworkDebugger, list[float]]:
    criterion = criterion or nn.CrossEntropyLoss()
    dbg = NetworkDebugger(model, opt if pass_optimizer else None, criterion, every=1, **kw)
    crit = dbg.criterion
    losses = []
    for step in range(steps):
        i = (step * batch) % len(x)
        xb, yb = x[i:i + batch], y[i:i + batch]
        if zero_grad and opt is not None:
            opt.zero_grad()
        loss = crit(model(xb), yb)
        dbg.record_loss(loss.detach())
        losses.append(float(loss.detach()))
        loss.backward()
        if opt is not None:
            opt.step()
        if scheduler is not None:
            scheduler.step()
    return dbg, losses


def codes(dbg: NetworkDebugger) -> list[str]:
    return [f.code for f in dbg.diagnose()]


def finding(dbg: NetworkDebugger, code: str):
    return next(f for f in dbg.diagnose() if f.code == code)


# -- optimizer and learning rate ------------------------------------------------------------------
def test_lr_too_high_lesson_bug1():
    torch.manual_seed(0)
    x, y = data(64)
    model = mlp(10, 32, 2)
    dbg, losses = train(model, torch.optim.SGD(model.parameters(), lr=10.0), x, y, steps=20)
    assert max(losses) > 10 * losses[0]            # the symptom: the loss blows up
    assert "LR_TOO_HIGH" in codes(dbg)
    assert finding(dbg, "LR_TOO_HIGH").evidence["max_update_ratio"] > 0.1


def test_lr_too_high_with_nan_also_reports_nan():
    torch.manual_seed(0)
    x, y = data(64)
    model = mlp(10, 64, 64, 2)
    dbg, losses = train(model, torch.optim.SGD(model.parameters(), lr=1e4), x, y, steps=15)
    assert not torch.isfinite(torch.tensor(losses[-1]))
    found = codes(dbg)
    assert "LR_TOO_HIGH" in found and "NAN_OR_INF" in found
    assert found[0] == "LR_TOO_HIGH"                # the cause first, then what it explains
    nan = next(f for f in dbg.diagnose() if f.code == "NAN_OR_INF")
    assert nan.explained_by in {"LR_TOO_HIGH", "EXPLODING_GRADIENT"}   # directly or by a chain


def test_lr_too_low():
    torch.manual_seed(0)
    x, y = data()
    model = mlp(10, 32, 2)
    dbg, losses = train(model, torch.optim.SGD(model.parameters(), lr=1e-6), x, y, steps=40)
    assert abs(losses[0] - losses[-1]) / losses[0] < 0.05
    assert codes(dbg) == ["LR_TOO_LOW"]


def test_lr_decayed_scheduler_stepped_every_batch():
    torch.manual_seed(0)
    x, y = data()
    model = mlp(10, 32, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    dbg, _ = train(model, opt, x, y, steps=40, scheduler=sched)
    assert opt.param_groups[0]["lr"] < 1e-2 * 1e-6    # the symptom
    f = finding(dbg, "LR_DECAYED")
    assert f.evidence["peak_lr"] == pytest.approx(1e-2)


def test_params_not_updated_layers_in_python_list():
    class ListNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = [nn.Linear(10, 32), nn.Linear(32, 32)]   # the bug: a plain list
            self.head = nn.Linear(32, 2)

        def forward(self, x):
            for layer in self.hidden:
                x = torch.relu(layer(x))
            return self.head(x)

    torch.manual_seed(0)
    x, y = data()
    model = ListNet()
    before = model.hidden[0].weight.detach().clone()
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=10)
    assert model.hidden[0].weight.grad is not None               # gradients arrive ...
    assert torch.equal(model.hidden[0].weight.detach(), before)   # ... but nothing steps them
    f = finding(dbg, "PARAMS_NOT_UPDATED")
    assert any("unregistered" in k for k in f.evidence["tensors"])


def test_params_not_updated_optimizer_over_other_parameters():
    torch.manual_seed(0)
    x, y = data()
    model = mlp(10, 32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model = copy.deepcopy(model)             # the bug: the optimizer holds the old tensors
    before = model[0].weight.detach().clone()
    dbg, _ = train(model, opt, x, y, steps=10)
    assert torch.equal(model[0].weight.detach(), before)
    f = finding(dbg, "PARAMS_NOT_UPDATED")
    assert "0.weight" in f.evidence["tensors"]


# -- training loop --------------------------------------------------------------------------------
def test_missing_zero_grad_lesson_bug3_without_passing_the_optimizer():
    torch.manual_seed(0)
    x, y = data(64)
    model = mlp(10, 32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # the lesson's call: NetworkDebugger(model) only; the optimizer is found when it steps
    dbg, _ = train(model, opt, x, y, steps=20, zero_grad=False, pass_optimizer=False)
    fresh = torch.autograd.grad(nn.CrossEntropyLoss()(model(x), y), model[0].weight)[0]
    assert model[0].weight.grad.norm() > 5 * fresh.norm()      # the symptom: .grad accumulates
    assert "MISSING_ZERO_GRAD" in codes(dbg)
    assert dbg.optimizer is opt


def test_eval_mode_during_training():
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 2))
    model.eval()                                   # the bug: never switched back to train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dbg, _ = train(model, opt, x, y, steps=10)
    assert torch.equal(model(x[:8]), model(x[:8]))  # the symptom: dropout is off
    f = finding(dbg, "EVAL_MODE_DURING_TRAINING")
    assert f.layer == "2"


def test_train_mode_during_eval():
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dbg, _ = train(model, opt, x, y, steps=5)
    with torch.no_grad():                          # the bug: model.eval() forgotten
        outs = [model(x[i:i + 32]) for i in range(0, 128, 32)]
        again = model(x[:32])
    assert not torch.equal(outs[0], again)         # the symptom: evaluation is random
    assert "TRAIN_MODE_DURING_EVAL" in codes(dbg)
    assert "EVAL_MODE_DURING_TRAINING" not in codes(dbg)


def test_no_gradient_graph_cut_by_detach():
    class Cut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(10, 32)
            self.head = nn.Linear(32, 2)

        def forward(self, x):
            return self.head(torch.relu(self.body(x)).detach())   # the bug

    torch.manual_seed(0)
    x, y = data()
    model = Cut()
    before = model.body.weight.detach().clone()
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=8)
    assert model.body.weight.grad is None and torch.equal(model.body.weight.detach(), before)
    f = finding(dbg, "NO_GRADIENT")
    assert f.evidence["params"] == ["body.weight", "body.bias"]


# -- numerics ---------------------------------------------------------------------------------------
class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)            # the bug: log of values that can be negative


def test_nan_or_inf_evidence_names_the_first_layer():
    torch.manual_seed(0)
    x, y = data(64)
    model = nn.Sequential(nn.Linear(10, 16), nn.Linear(16, 16), Log(), nn.Linear(16, 2))
    dbg, losses = train(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, steps=3)
    assert all(l != l for l in losses)             # the symptom: NaN loss
    f = finding(dbg, "NAN_OR_INF")
    assert f.layer == "2" and f.evidence["first_nonfinite_layer"] == "2"
    assert f.evidence["first_nonfinite_loss_index"] == 0


# -- activations ---------------------------------------------------------------------------------
def test_dead_neurons_lesson_bug2():
    torch.manual_seed(0)
    x, y = data(64)
    model = mlp(10, 32, 32, 2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.fill_(-1.0)
                m.bias.fill_(-5.0)
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, steps=30)
    assert (model[:4](x) == 0).all()              # the symptom: every unit outputs 0
    dead = [f for f in dbg.diagnose() if f.code == "DEAD_NEURONS"]
    by_layer = {f.layer: f.evidence["dead_fraction"] for f in dead}
    assert by_layer["3"] == 1.0 and by_layer.get("1", 1.0) >= 0.5
    assert "VANISHING_GRADIENT" not in codes(dbg)      # explained by the dead units


def deep_sigmoid(depth: int = 20, width: int = 32) -> nn.Sequential:
    return mlp(10, *[width] * depth, 2, act=nn.Sigmoid)


def test_collapsed_activations_deep_sigmoid():
    torch.manual_seed(0)
    x, y = data(128)
    model = deep_sigmoid()
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, steps=5)
    out = model(x)
    assert (out.std(0) / out.abs().mean()).max() < 1e-4     # the symptom: same output for all
    f = finding(dbg, "COLLAPSED_ACTIVATIONS")
    assert f.evidence["sample_std"] < 1e-4 * max(f.evidence["act_std"], abs(f.evidence["act_mean"]))


def test_vanishing_gradient_deep_sigmoid():
    torch.manual_seed(0)
    x, y = data(128)
    model = deep_sigmoid()
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, steps=5)
    first = model[0].weight.grad.norm() / model[0].weight.norm()
    last = model[-1].weight.grad.norm() / model[-1].weight.norm()
    assert first / last < 1e-3                    # the symptom
    f = finding(dbg, "VANISHING_GRADIENT")
    assert f.evidence["first_param"] == "0.weight" and f.evidence["ratio"] < 1e-3


def deep_relu_exploding(depth: int = 20, width: int = 64, gain: float = 2.5) -> nn.Sequential:
    model = mlp(10, *[width] * depth, 2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=gain * (2 / m.in_features) ** 0.5)
                m.bias.zero_()
    return model


def test_exploding_gradient_suggests_a_clip_value():
    torch.manual_seed(0)
    x, y = data(64)
    model = deep_relu_exploding()
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=1e-12), x, y, steps=5)
    total = torch.sqrt(sum(p.grad.norm() ** 2 for p in model.parameters()))
    assert total > 1e4                            # the symptom: huge gradients
    f = finding(dbg, "EXPLODING_GRADIENT")
    assert f.evidence["suggested_clip"] > 0 and "clip_grad_norm_" in f.advice


def test_exploding_gradient_growing_suggests_clip_from_healthy_steps():
    from lesson.debugger import rules
    history = [{"step": s, "layers": {}, "lr": 0.1, "loss": 1.0,
                "params": {"w": {"grad_norm": g, "weight_norm": 10.0, "update_ratio": 1e-3,
                                 "ndim": 2, "nonfinite_grad": 0}}}
               for s, g in enumerate([1.0, 1.2, 0.9, 1.1, 1.0, 5.0, 80.0, 400.0, 3000.0])]
    found = rules.rule_exploding_gradient(rules.Evidence(history=history), rules.Thresholds())
    assert found and found[0].evidence["suggested_clip"] == pytest.approx(1.2, rel=0.3)


def test_exploding_activations():
    torch.manual_seed(0)
    x, y = data(64)
    model = deep_relu_exploding()
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=1e-12), x, y, steps=3)
    assert model(x).abs().max() > 1e4            # the symptom
    assert "EXPLODING_ACTIVATIONS" in codes(dbg)


def test_symmetric_weights_constant_init():
    torch.manual_seed(0)
    x, y = data()
    model = mlp(10, 32, 2)
    with torch.no_grad():                          # the bug: a constant initialisation
        for m in (model[0], model[2]):
            m.weight.fill_(0.1)
            m.bias.zero_()
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y, steps=20)
    w = model[0].weight
    assert torch.equal(w, w[:1].expand_as(w))        # the symptom: units stay identical
    assert [f.layer for f in dbg.diagnose() if f.code == "SYMMETRIC_WEIGHTS"] == ["0"]


# -- generalisation -------------------------------------------------------------------------------
def test_overfitting_validation_rises_while_training_falls():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    # labels carry some signal (feature 0), plus noise the net memorises: validation loss
    # first falls below chance, then rises (random labels would be LABELS_SHUFFLED instead)
    x_tr, x_va = torch.randn(32, 10, generator=g), torch.randn(256, 10, generator=g)
    label = lambda x: ((x[:, 0] + 0.3 * torch.randn(len(x), generator=g)) > 0).long()
    y_tr, y_va = label(x_tr), label(x_va)
    model = mlp(10, 128, 128, 2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    with NetworkDebugger(model, opt, crit) as dbg:
        for epoch in range(12):
            for _ in range(5):
                opt.zero_grad()
                loss = crit(model(x_tr), y_tr)
                dbg.record_loss(loss.detach())
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                dbg.record_val_loss(crit(model(x_va), y_va))
            model.train()
    assert dbg.val_loss_history[-1] > min(dbg.val_loss_history) * 1.2   # the symptom
    assert dbg.loss_history[-1] < dbg.loss_history[0] / 5
    assert "OVERFITTING" in codes(dbg)


# -- loss inputs and batches (inspectors of lesson.debugger.loss_inputs / lesson.debugger.batches) ---------------------
def test_double_softmax():
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(mlp(10, 32, 2), nn.Softmax(dim=1))
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=10)
    assert torch.allclose(model(x).sum(1), torch.ones(len(x)))
    assert "DOUBLE_SOFTMAX" in codes(dbg)


def test_softmax_wrong_dim():
    torch.manual_seed(0)
    x, y = data()
    model = nn.Sequential(mlp(10, 32, 2), nn.LogSoftmax(dim=0))
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=10,
                   criterion=nn.NLLLoss())
    assert torch.allclose(model(x[:64]).exp().sum(0), torch.ones(2), atol=1e-4)
    assert "SOFTMAX_WRONG_DIM" in codes(dbg)


def test_nll_without_log_softmax():
    torch.manual_seed(0)
    x, y = data()
    model = mlp(10, 32, 2)
    dbg, losses = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=30,
                        criterion=nn.NLLLoss())
    assert losses[-1] < 0                        # the symptom: a "loss" below 0
    assert "NLL_WITHOUT_LOG_SOFTMAX" in codes(dbg)


def test_loss_shape_mismatch_with_a_plain_function():
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    y = x[:, 0] * 2.0
    model = mlp(10, 32, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # mse_loss warns about the broadcast
        dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=10,
                       criterion=F.mse_loss)
        assert (model(x[:64]) - y[:64]).shape == (64, 64)   # the symptom: (N,1) - (N,)
    assert "LOSS_SHAPE_MISMATCH" in codes(dbg)


def test_output_range_mismatch():
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    y = (x[:, :1] - 1.0)                          # mostly negative targets
    model = nn.Sequential(mlp(10, 32, 1), nn.ReLU())
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, steps=10,
                   criterion=nn.MSELoss())
    assert (model(x) >= 0).all()
    assert "OUTPUT_RANGE_MISMATCH" in codes(dbg)


def test_unnormalized_inputs():
    torch.manual_seed(0)
    x, y = data()
    x = x * 50 + 200
    model = mlp(10, 32, 2)
    dbg, _ = train(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, steps=10)
    assert x.mean() > 100
    assert "UNNORMALIZED_INPUTS" in codes(dbg)


def test_nonfinite_input():
    torch.manual_seed(0)
    x, y = data()
    x[5, 3] = float("nan")
    model = mlp(10, 32, 2)
    dbg, losses = train(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y, steps=4)
    assert losses[0] != losses[0]
    found = codes(dbg)
    assert "NONFINITE_INPUT" in found and "NAN_OR_INF" in found


def test_unshuffled_batches():
    torch.manual_seed(0)
    x, y = data(512)
    order = torch.argsort(y, stable=True)         # the bug: sorted by label, never shuffled
    x, y = x[order], y[order]
    model = mlp(10, 32, 2)
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y, steps=8, batch=64)
    assert sum(len(torch.unique(y[i:i + 64])) == 1 for i in range(0, 512, 64)) >= 7
    assert "UNSHUFFLED_BATCHES" in codes(dbg)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_lesson_bugs_caught_across_seeds(seed):
    """The lesson's lr=10 and missing-zero_grad networks, several seeds, the lesson's calls."""
    torch.manual_seed(42)
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(seed)
    model = mlp(10, 32, 2)
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=10.0), x, y, steps=20,
                   pass_optimizer=False)
    found = codes(dbg)
    assert "LR_TOO_HIGH" in found and "MISSING_ZERO_GRAD" not in found
    model = mlp(10, 32, 2)
    dbg, _ = train(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, steps=50,
                   zero_grad=False, pass_optimizer=False)
    assert "MISSING_ZERO_GRAD" in codes(dbg) and "LR_TOO_HIGH" not in codes(dbg)
