"""The lesson's code, used the way the lesson uses it, runs against `lesson` unchanged.

"Build it" (steps 1-5): the calls a student makes: NetworkDebugger(model) with record_loss(
loss.item()), print_report(), remove_hooks() and the check_* verdicts on the demo's broken
networks, then overfit_one_batch, find_learning_rate and gradient_check with the lesson's
signatures. "Use it": the PyTorch-native part (detect_anomaly, per-parameter gradient means),
with the undefined names (input_tensor, criterion, target) defined here. The TensorBoard and
W&B snippets belong to the production-monitoring tests.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import lesson
from lesson import NetworkDebugger

LESSON_VERDICTS = {"HEALTHY", "NAN_OR_INF", "NOT_DECREASING", "OSCILLATING", "NOT_ENOUGH_DATA"}


@pytest.fixture()
def demo_data():
    torch.manual_seed(42)
    x = torch.randn(64, 10)
    return x, (x[:, 0] > 0).long()


def lesson_loop(model, optimizer, x, y, steps, zero_grad=True):
    """Step 5's training loop, the lesson's way: NetworkDebugger(model) and loss.item()."""
    debugger = NetworkDebugger(model)
    criterion = nn.CrossEntropyLoss()
    for _ in range(steps):
        if zero_grad:
            optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        debugger.record_loss(loss.item())
        loss.backward()
        optimizer.step()
    return debugger


def two_layer() -> nn.Sequential:
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))


def finish(debugger, capsys) -> tuple[list[str], str]:
    verdict = debugger.check_loss_health()
    assert verdict in LESSON_VERDICTS
    for items in (debugger.check_activations(), debugger.check_gradients()):
        assert items == ["HEALTHY"] or all(":" in item for item in items)
    debugger.print_report()
    codes = [f.code for f in debugger.diagnose()]
    debugger.remove_hooks()
    assert debugger.hooks == []
    return codes, capsys.readouterr().out


def test_step5_bug1_learning_rate_too_high(demo_data, capsys):
    x, y = demo_data
    model = two_layer()
    debugger = lesson_loop(model, torch.optim.SGD(model.parameters(), lr=10.0), x, y, 20)
    codes, out = finish(debugger, capsys)
    assert "LR_TOO_HIGH" in codes and "LR_TOO_HIGH" in out


def test_step5_bug2_dead_relus(demo_data, capsys):
    x, y = demo_data
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 2))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.fill_(-1.0)
                m.bias.fill_(-5.0)
    debugger = lesson_loop(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, 50)
    assert any(item.startswith("DEAD_NEURONS") for item in debugger.check_activations())
    codes, _ = finish(debugger, capsys)
    assert "DEAD_NEURONS" in codes


def test_step5_bug3_missing_zero_grad(demo_data, capsys):
    x, y = demo_data
    model = two_layer()
    debugger = lesson_loop(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, 50,
                           zero_grad=False)
    codes, _ = finish(debugger, capsys)
    assert "MISSING_ZERO_GRAD" in codes          # the lesson's debugger never saw this one


def test_step5_healthy_network(demo_data, capsys):
    x, y = demo_data
    model = two_layer()
    debugger = lesson_loop(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y, 50)
    assert debugger.check_loss_health() == "HEALTHY"
    assert debugger.check_activations() == ["HEALTHY"]
    assert debugger.check_gradients() == ["HEALTHY"]
    codes, _ = finish(debugger, capsys)
    assert codes == []


def test_steps2_to_4_active_checks_with_the_lessons_signatures(demo_data, capsys):
    x, y = demo_data
    criterion = nn.CrossEntropyLoss()
    assert lesson.overfit_one_batch(two_layer(), x[:8], y[:8], criterion, lr=0.01, steps=200)
    pairs = lesson.find_learning_rate(two_layer(), x, y, criterion, start_lr=1e-7, end_lr=10,
                                      steps=100)
    assert len(pairs) >= 10 and all(len(p) == 2 for p in pairs)
    diff = lesson.gradient_check(nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 2)),
                                 x[:4], y[:4], criterion, eps=1e-4)
    assert diff < 1e-5
    assert "OVERFIT" in capsys.readouterr().out.upper()


def test_demo_function_runs(capsys):
    lesson.demo_broken_networks()
    out = capsys.readouterr().out
    for title in ["BUG 1", "BUG 2", "BUG 3", "HEALTHY", "OVERFIT", "LEARNING RATE", "GRADIENT"]:
        assert title in out


def test_use_it_pytorch_native_tools(capsys):
    model = nn.Sequential(nn.Linear(768, 256), nn.ReLU(), nn.Linear(256, 10))
    input_tensor = torch.randn(4, 768)          # undefined in the lesson: defined here
    criterion = nn.CrossEntropyLoss()
    target = torch.randint(0, 10, (4,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # detect_anomaly announces itself with a warning
        with torch.autograd.detect_anomaly():
            output = model(input_tensor)
            loss = criterion(output, target)
            loss.backward()
    for name, param in model.named_parameters():
        if param.grad is not None:
            print(f"{name}: grad_mean={param.grad.abs().mean():.2e}")
    out = capsys.readouterr().out
    assert out.count("grad_mean=") == 4
