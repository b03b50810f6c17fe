"""The debugger's fast statistics (light ones every statistics step, full ones on some, reused
work buffers) give the same numbers as a direct computation."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lesson.debugger.engine import RECORD_BATCH
from lesson.debugger.monitor import NetworkDebugger
from lesson.debugger.stats import (ACT_FULL_SUMS, activation_details, activation_summary,
                          gradient_details, gradient_norm, unit_sums)


def units_of(x: torch.Tensor) -> torch.Tensor:
    """Per-unit sums, written out: channels for images, the last dimension otherwise."""
    x = x.double()
    if x.dim() >= 4:
        return x.transpose(0, 1).reshape(x.shape[1], -1).sum(1)
    return x.reshape(-1, x.shape[-1]).sum(0)


@pytest.mark.parametrize("shape", [(64, 300), (32, 4, 5, 5), (8, 7, 6), (300, 10)])
def test_activation_statistics_match_direct_computation_across_shapes(shape):
    torch.manual_seed(0)
    for relu_like, x in ((False, torch.randn(shape) * 3 + 1), (True, torch.relu(torch.randn(shape)))):
        units, sumsq = activation_summary(x)
        assert units.tolist() == pytest.approx(units_of(x).tolist(), rel=1e-4, abs=1e-3)
        assert sumsq.item() == pytest.approx((x.double() ** 2).sum().item(), rel=1e-5)
        sums, maxes = activation_details(x, relu_like, units)     # as the monitor calls it
        assert torch.allclose(activation_details(x, relu_like)[0], sums, rtol=1e-5)
        got = dict(zip(ACT_FULL_SUMS, sums.tolist()))
        flat = x.double().reshape(x.shape[0], -1)
        assert got["nonzero"] == (flat != 0).sum().item()
        assert got["sample_std"] == pytest.approx(flat.std(dim=0, unbiased=False).mean().item(),
                                                  rel=1e-4)
        assert maxes[0].item() == x.max().item() and -maxes[1].item() == x.min().item()


def test_a_one_dim_output_is_one_unit():
    assert unit_sums(torch.tensor([1.0, 2.0, 3.0])).tolist() == [6.0]


def test_collapsed_layer_sample_std_is_rounding_only_after_other_shapes_used_the_buffer():
    activation_details(torch.randn(512, 512), False)      # leaves garbage in the buffer
    x = torch.full((16, 32), 1234.5) + torch.linspace(0, 1, 32)   # every sample the same
    sums, _ = activation_details(x, False)
    assert dict(zip(ACT_FULL_SUMS, sums.tolist()))["sample_std"] < 1e-6 * 1234.5


def test_gradient_norm_and_details():
    g = torch.randn(100, 30)
    assert gradient_norm(g).item() == pytest.approx((g * g).sum().item(), rel=1e-5)
    sums, maxes = gradient_details(g)
    assert sums.tolist() == pytest.approx([g.abs().sum().item(), g.sum().item()],
                                          rel=1e-4, abs=1e-4)
    assert maxes.item() == g.abs().max().item()
    bad = g.clone()
    bad[3, 3] = float("nan")
    assert not math.isfinite(gradient_norm(bad).item())


def test_light_records_count_dead_units_and_nonfinite_like_a_direct_computation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        model[0].bias[:5] = -100.0                       # five units can never fire
    dbg = NetworkDebugger(model, every=1, warmup=0, full_every=1000)
    x = torch.randn(32, 6)
    model(x).sum().backward()
    model(x).sum().backward()                            # closes step 0, writes step 1
    rec = dbg.snapshot()
    assert rec["step"] == 1 and rec["layers"]["1"]["sample_std"] is None   # a light record
    relu = torch.relu(model[0](x))
    assert rec["layers"]["1"]["dead_fraction"] == (relu.sum(0) == 0).float().mean().item()
    assert rec["layers"]["1"]["act_mean"] == pytest.approx(relu.mean().item(), rel=1e-5)
    assert rec["layers"]["1"]["act_std"] == pytest.approx(relu.std(unbiased=False).item(),
                                                          rel=1e-4)
    x[2, 1] = float("nan")
    model(x).sum().backward()
    model(x).sum().backward()
    assert dbg.snapshot()["layers"]["0"]["nonfinite"] == 16    # every unit saw the NaN sample


def test_every_step_records_norms_and_full_steps_add_exact_details():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    dbg = NetworkDebugger(model, opt, every=1, warmup=2, full_every=20)   # full: 0, 1, 20
    for step in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grad0 = model[0].weight.grad.clone()
        layer0 = torch.cat([grad0.reshape(-1), model[0].bias.grad.reshape(-1)])
        opt.step()
        rec = dbg.snapshot()
        assert rec["step"] == step
        p = rec["params"]["0.weight"]
        assert p["grad_norm"] == pytest.approx(grad0.norm().item(), rel=1e-5)
        full = step < 2 or step % 20 == 0
        assert ("grad_abs_mean" in p) == full
        assert (rec["layers"]["1"]["sample_std"] is not None) == full
        if full:
            assert p["update_ratio"] == pytest.approx(
                0.1 * grad0.norm().item() / p["weight_norm"], rel=1e-3)
            assert p["grad_abs_mean"] == pytest.approx(grad0.abs().mean().item(), rel=1e-5)
            last_full = layer0
        else:
            assert p["update_ratio"] is None
    assert dbg.gradient_stats["0"]["abs_mean"] == pytest.approx(
        last_full.abs().mean().item(), rel=1e-5)
    assert dbg.activation_stats["1"]["sample_std"] is not None     # from the last full record


def test_full_every_one_makes_every_statistics_step_full():
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt, every=1, warmup=0, full_every=1)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(8, 6)).sum().backward()
        opt.step()
    dbg.snapshot()
    assert all(r["params"]["0.weight"]["update_ratio"] is not None for r in dbg.history)
    with pytest.raises(ValueError, match="full_every"):
        NetworkDebugger(model, full_every=0)


def test_light_records_copied_in_batches_keep_their_own_loss_and_lr():
    def run(listen: bool) -> tuple[NetworkDebugger, list[dict]]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
        dbg = NetworkDebugger(model, opt, every=1, warmup=0, full_every=1000)
        seen: list[dict] = []
        if listen:                      # a callback gets every record as it is made
            dbg.add_callback(seen.append)
        for step in range(37):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            dbg.record_loss(loss.detach())
            loss.backward()
            opt.step()
            sched.step()
            if listen:
                assert seen[-1]["step"] == step
        return dbg, seen

    quiet, _ = run(listen=False)
    listened, seen = run(listen=True)
    assert quiet.history == listened.history == seen
    assert [r["step"] for r in quiet.history] == list(range(37))
    losses = quiet.loss_history
    for r in quiet.history:
        assert r["loss"] == losses[r["step"]]
        assert r["lr"] == pytest.approx(0.1 * 0.9 ** r["step"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA to detect host syncs")
def test_light_steps_never_sync_with_the_device():
    """At every=1 the light steps between two record transfers launch work only: any host
    sync raises in this mode. (Not run on the CPU-only CI.)"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    x, y = torch.randn(32, 6, device="cuda"), torch.randint(0, 3, (32,), device="cuda")
    dbg = NetworkDebugger(model, opt, crit, every=1, warmup=0, full_every=1000)

    def step() -> None:
        opt.zero_grad()
        loss = crit(model(x), y)
        dbg.record_loss(loss.detach())
        loss.backward()
        opt.step()

    step()                                          # step 0 is full: its record syncs once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(RECORD_BATCH - 1):           # light steps, all deferred
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [r["step"] for r in dbg.history] == list(range(RECORD_BATCH))
