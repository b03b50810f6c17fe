"""The debugger's fast statistics (reused work buffers, deferred lesson-view gradient extras)
give the same numbers as a direct computation."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lesson.monitor import NetworkDebugger
from lesson.stats import ACT_SUMS, activation_accumulators, gradient_accumulators


def reference(x: torch.Tensor) -> dict[str, float]:
    flat = x.double().reshape(x.shape[0], -1)
    return {"sum": flat.sum().item(), "sumsq": (flat * flat).sum().item(),
            "zeros": (flat == 0).sum().item(), "nonfinite": 0.0,
            "sample_std": flat.std(dim=0, unbiased=False).mean().item()}


@pytest.mark.parametrize("shape", [(64, 300), (32, 4, 5, 5), (8, 7, 6), (300, 10)])
def test_activation_sums_match_direct_computation_across_shapes(shape):
    torch.manual_seed(0)
    for relu_like, x in ((False, torch.randn(shape) * 3 + 1), (True, torch.relu(torch.randn(shape)))):
        sums, maxes, count, n = activation_accumulators(x, relu_like)
        got = dict(zip(ACT_SUMS, sums.tolist()))
        for key, want in reference(x).items():
            assert got[key] == pytest.approx(want, rel=1e-4, abs=1e-3), key
        assert maxes[0].item() == x.max().item() and -maxes[1].item() == x.min().item()
        assert (count, n) == (x.numel(), shape[0])


def test_collapsed_layer_sample_std_is_rounding_only_after_other_shapes_used_the_buffer():
    activation_accumulators(torch.randn(512, 512), False)      # leaves garbage in the buffer
    x = torch.full((16, 32), 1234.5) + torch.linspace(0, 1, 32)   # every sample the same
    sums, _, _, _ = activation_accumulators(x, False)
    assert dict(zip(ACT_SUMS, sums.tolist()))["sample_std"] < 1e-6 * 1234.5


def test_gradient_sums_detailed_and_cheap():
    g = torch.randn(100, 30)
    sums, maxes = gradient_accumulators(g)
    assert sums.tolist() == pytest.approx([(g * g).sum().item(), g.abs().sum().item(),
                                           g.sum().item(), 0.0], rel=1e-4, abs=1e-4)
    assert maxes.item() == g.abs().max().item()
    cheap, _ = gradient_accumulators(g, detailed=False)
    assert cheap[0].item() == pytest.approx((g * g).sum().item(), rel=1e-5)
    bad = g.clone()
    bad[3, 3] = float("nan")
    assert gradient_accumulators(bad, detailed=False)[0][3].item() == 1.0


def test_every_step_records_norms_and_gradient_stats_stay_exact():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    dbg = NetworkDebugger(model, opt, every=1, warmup=2)
    for _ in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grad0 = model[0].weight.grad.clone()
        layer0 = torch.cat([grad0.reshape(-1), model[0].bias.grad.reshape(-1)])
        opt.step()
        rec = dbg.snapshot()
        p = rec["params"]["0.weight"]
        assert p["grad_norm"] == pytest.approx(grad0.norm().item(), rel=1e-5)
        assert p["update_ratio"] == pytest.approx(0.1 * grad0.norm().item() / p["weight_norm"],
                                                  rel=1e-3)
        if "grad_abs_mean" in p:
            assert p["grad_abs_mean"] == pytest.approx(grad0.abs().mean().item(), rel=1e-5)
            last_detailed = layer0
    detailed = [r["step"] for r in dbg.history if "grad_abs_mean" in r["params"]["0.weight"]]
    assert detailed[:2] == [0, 1] and len(detailed) >= 3 and len(detailed) < 30
    assert dbg.gradient_stats["0"]["abs_mean"] == pytest.approx(
        last_detailed.abs().mean().item(), rel=1e-5)
