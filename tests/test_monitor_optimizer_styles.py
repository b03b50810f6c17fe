"""The debugger on training loops beyond `loss.backward(); opt.step()`: closure optimizers
(L-BFGS, `step(closure)`), SAM's two passes, gradients set by hand (torch.func, per-sample
gradients under vmap), parametrized weights and bf16 values upcast before the loss. Each healthy
loop trains (its loss falls) and gets no finding; the faults they resemble are still named."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F
from torch.nn.utils import parametrizations

from lesson.debugger.monitor import NetworkDebugger
from lesson.findings import layer_of


def data(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x @ torch.tensor([1.0, -2.0, 0.5, 1.5]) > 0).long()


def batches(x: torch.Tensor, y: torch.Tensor, steps: int, size: int = 32):
    """`steps` batches of `size` rows, in order, going round the data."""
    for k in range(steps):
        i = k * size % len(x)
        yield x[i:i + size], y[i:i + size]


def tiny(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))


def codes(dbg: NetworkDebugger) -> list[str]:
    return [f.code for f in dbg.diagnose()]


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.LBFGS(p, lr=1, max_iter=5, line_search_fn="strong_wolfe"),
    lambda p: torch.optim.LBFGS(p, lr=0.1, max_iter=1),
    lambda p: torch.optim.SGD(p, lr=0.5),
], ids=["lbfgs-line-search", "lbfgs-one-iteration", "sgd-closure"])
def test_closure_steps_are_no_fault(make):
    """`opt.step(closure)` runs its forward and backward inside the step: the pre-step hook sees
    the last step's gradients (no fresh ones yet), which read as tensors moved without a
    gradient (FROZEN_PARAMS_MOVE on every one); L-BFGS evaluates the closure several times per
    step with zero_grad() in it (read as ZERO_GRAD_IN_ACCUMULATION) and takes steps of a
    weight's own size on its way to a loss near 0 (read as LR_TOO_HIGH)."""
    x, y = data()
    model = tiny()
    opt = make(model.parameters())
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(30):
            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss
            dbg.record_loss(opt.step(closure).detach())
    losses = dbg.loss_history
    assert losses[-1] < 0.5 * losses[0]                     # it trains
    assert codes(dbg) == [] and dbg.errors == []


def test_closure_without_zero_grad_is_still_named():
    x, y = data()
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(60):
            def closure() -> torch.Tensor:
                loss = F.cross_entropy(model(x), y)          # no zero_grad(): sums pile up
                loss.backward()
                return loss
            dbg.record_loss(opt.step(closure).detach())
    assert "MISSING_ZERO_GRAD" in codes(dbg)


def test_sam_two_passes_at_other_weights_are_no_accumulation():
    """SAM: a pass, an ascent step on the weights, zero_grad(), a second pass there, the
    weights put back, the step. Clearing between its passes is the method, not a lost
    micro-batch: only passes at the same weights are accumulation."""
    x, y = data(512)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rho = 0.05
    with NetworkDebugger(model, opt) as dbg:
        for xb, yb in batches(x, y, 64):
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            params = [p for p in model.parameters() if p.grad is not None]
            scale = rho / torch.norm(torch.stack([p.grad.norm() for p in params]))
            with torch.no_grad():
                eps = [p.grad * scale for p in params]
                for p, e in zip(params, eps):
                    p.add_(e)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            with torch.no_grad():
                for p, e in zip(params, eps):
                    p.sub_(e)
            opt.step()
            dbg.record_loss(loss.detach())
    losses = dbg.loss_history
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    assert dbg.evidence().accumulating_steps == 0
    assert codes(dbg) == [] and dbg.errors == []


def test_zero_grad_between_passes_at_the_same_weights_is_still_named():
    x, y = data(512)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with NetworkDebugger(model, opt) as dbg:
        for i in range(0, 512 * 4, 64):
            for half in (0, 32):
                opt.zero_grad()                              # inside the accumulation loop
                xb, yb = x[(i + half) % 512:][:32], y[(i + half) % 512:][:32]
                loss = F.cross_entropy(model(xb), yb) / 2
                loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
    assert "ZERO_GRAD_IN_ACCUMULATION" in codes(dbg)


def _functional_loss(model: nn.Module):
    def loss_of(params, xb, yb):
        return F.cross_entropy(functional_call(model, params, (xb,)), yb)
    return loss_of


def test_gradients_set_by_hand_are_gradients():
    """torch.func.grad on detached parameters, assigned to p.grad, then opt.step(): no
    backward reaches the parameters, but they have gradients. Read as tensors moved without
    a gradient (FROZEN_PARAMS_MOVE) and, on statistics steps, as tensors that never got one
    (NO_GRADIENT)."""
    x, y = data()
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss_of = _functional_loss(model)
    with NetworkDebugger(model, opt, warmup=20) as dbg:
        for xb, yb in batches(x, y, 64):
            params = {n: p.detach() for n, p in model.named_parameters()}
            grads = grad(loss_of)(params, xb, yb)
            for n, p in model.named_parameters():
                p.grad = grads[n]
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                dbg.record_loss(loss_of(params, xb, yb))
    losses = dbg.loss_history
    assert sum(losses[-8:]) < 0.5 * sum(losses[:8])
    assert codes(dbg) == [] and dbg.errors == []


def test_per_sample_gradients_under_vmap_do_not_break_the_debugger():
    """DP-SGD style: vmap(grad(functional_call(model, ...))) calls the model inside two
    transforms, so the debugger's hooks ran there and kept batched tensors that broke the
    record (diagnose() raised). Hooks now stand aside inside transforms."""
    x, y = data()
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss_of = _functional_loss(model)

    def one(params, xi, yi):
        return loss_of(params, xi[None], yi[None])
    with NetworkDebugger(model, opt, warmup=3, every=2) as dbg:
        for xb, yb in batches(x, y, 32):
            params = {n: p.detach() for n, p in model.named_parameters()}
            per_sample = vmap(grad(one), in_dims=(None, 0, 0))(params, xb, yb)
            for n, p in model.named_parameters():
                p.grad = per_sample[n].clamp(-1, 1).mean(0)   # clipped, then averaged
            opt.step()
            with torch.no_grad():
                dbg.record_loss(loss_of(params, xb, yb))
            model(xb)                                       # an ordinary pass too
    assert dbg.loss_history[-1] < dbg.loss_history[0]
    assert len(dbg.history) > 10 and dbg.errors == []
    assert codes(dbg) == []


def test_a_frozen_tensor_with_a_zero_filled_gradient_still_moves_and_is_named():
    """The fault the hand-set gradients must not hide: a tensor "frozen" by zero-filling its
    gradient, moved by momentum and weight decay."""
    x, y = data()
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    with NetworkDebugger(model, opt) as dbg:
        for xb, yb in batches(x, y, 64):
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            model[0].weight.grad.zero_()                    # "freeze" the first layer
            opt.step()
            dbg.record_loss(loss.detach())
    assert "FROZEN_PARAMS_MOVE" in codes(dbg)


def test_layer_of_a_parametrized_weight_is_its_module():
    assert layer_of("fc1.weight") == "fc1"
    assert layer_of("bias") == ""
    assert layer_of("0.parametrizations.weight.original1") == "0"
    assert layer_of("block.conv.parametrizations.weight.original") == "block.conv"
    assert layer_of("parametrizations.weight.original0") == ""
    assert layer_of("myparametrizations.weight") == "myparametrizations"


class Clamp(nn.Module):
    """A hand-written ReLU6: its dead units are not the ReLU family's, the gradient tells."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(0, 6)


@pytest.mark.parametrize("wrap", [None, parametrizations.weight_norm,
                                  parametrizations.spectral_norm],
                         ids=["plain", "weight_norm", "spectral_norm"])
def test_parametrized_weights_keep_the_vanishing_gradient_in_sight(wrap):
    """weight_norm names the weight `0.parametrizations.weight.original1`: it was filed under a
    layer no forward runs, and the parametrization's own module was watched as a layer, so the
    layer order put the first layer out of place, and the dead first layer's vanishing
    gradient went unnamed with weight_norm while named without it."""
    torch.manual_seed(0)
    lin = (lambda *a: wrap(nn.Linear(*a))) if wrap is not None else nn.Linear
    model = nn.Sequential(lin(16, 64), Clamp(), lin(64, 64), Clamp(), nn.Linear(64, 4))
    with torch.no_grad():
        model[0].bias.fill_(-8.0)                          # every first-layer unit dead
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(60):
            x = torch.randn(64, 16, generator=g)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), x[:, :4].argmax(1))
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
    assert not any(p.grad.any() for p in model[0].parameters())   # the symptom
    found = [(f.code, f.layer) for f in dbg.diagnose()]
    assert ("VANISHING_GRADIENT", "0") in found, found
    assert sorted(dbg.gradient_stats) == ["0", "2", "4"]
    assert not any("parametrizations" in name for name in dbg.evidence().layer_order)


def test_log_softmax_over_the_batch_upcast_from_bfloat16_is_named_as_such():
    """Under bf16 autocast, log_softmax(dim=0) then `.float()`: the values carry bf16 rounding
    (column logsumexp about 1e-2) in a float32 tensor. Judged with float32's tolerance, the
    columns were no log-probabilities and the rows not either: NLL_WITHOUT_LOG_SOFTMAX, whose
    advice is to add the log_softmax that is there."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(40):
            x = torch.randn(64, 20, generator=g)
            y = x[:, :10].argmax(1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logp = F.log_softmax(model(x), dim=0)       # the bug: over the batch
            loss = F.nll_loss(logp.float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
    found = codes(dbg)
    assert "SOFTMAX_WRONG_DIM" in found and "NLL_WITHOUT_LOG_SOFTMAX" not in found
