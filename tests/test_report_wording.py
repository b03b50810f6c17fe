"""The report says what the numbers say: a ratio below 1 is a shrink, a flat tail is not a
falling curve, and a cause is never dated after the consequence it explains."""
from __future__ import annotations

import torch
from torch import nn

from lesson import NetworkDebugger
from lesson.debugger import rules
from lesson.debugger.report_text import format_report
from lesson.debugger.rules import Evidence, Thresholds
from lesson.findings import Finding, sort_findings
from tests.test_rules import _layer


def test_activations_that_shrank_but_stay_huge_are_said_to_shrink():
    first = {"step": 0, "loss": 2.3, "lr": 1e-3, "params": {},
             "layers": {"hidden": _layer(5e6), "logits": _layer(1.0)}}
    later = {"step": 100, "loss": 2.0, "lr": 1e-3, "params": {},
             "layers": {"hidden": _layer(1e6), "logits": _layer(1.0)}}
    ev = Evidence(history=[first, later], steps=100, layer_order=["hidden", "logits"])
    found = [f for f in rules.rule_activation_scale(ev, Thresholds())
             if f.code == "EXPLODING_ACTIVATIONS"]
    assert found, "a layer at rms 1e6 explodes, whichever way it went since"
    assert "shrank 5x" in found[0].message and "grew 0.2" not in found[0].message
    grown = {**later, "layers": {"hidden": _layer(2.5e7), "logits": _layer(1.0)}}
    ev = Evidence(history=[first, grown], steps=100, layer_order=["hidden", "logits"])
    message = next(f.message for f in rules.rule_activation_scale(ev, Thresholds())
                   if f.code == "EXPLODING_ACTIVATIONS")
    assert "grew 5x" in message


def test_tail_trend_reads_the_last_losses_only():
    assert rules.tail_trend([3.0, 2.0, 1.0] + [0.5] * 5) == "is flat"
    assert rules.tail_trend([1.0] * 5 + [0.9, 0.8, 0.7, 0.6, 0.5]) == "falls"
    assert rules.tail_trend([0.5, 0.4, 0.3, 0.35, 0.45, 0.6]) == "rises"
    assert rules.tail_trend([1.0, float("nan"), 1.0, 1.0]) == "cannot be read"


def test_a_report_with_findings_and_a_flat_tail_does_not_say_the_curve_falls():
    """A net whose hidden layer is dead from the start, on labels 9:1: the output bias learns
    the prior (the loss falls by half, so the lesson's loss checks pass), then the loss is
    exactly flat. The report must not call that curve falling."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), (torch.arange(64) % 10 == 0).long()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)            # every unit dead for every sample
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for _ in range(200):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
        report = format_report(debugger)
    assert debugger.check_loss_health() == "HEALTHY"
    assert len(set(debugger.loss_history[-5:])) == 1
    assert "DEAD_NEURONS" in report
    assert "falls" not in report and "is flat" in report and "not healthy" in report


def test_a_cause_is_dated_no_later_than_what_it_explains():
    cause = Finding("VANISHING_GRADIENT", "first layers starve", step=50)
    consequence = Finding("COLLAPSED_ACTIVATIONS", "no variation", step=8)
    nan = Finding("NAN_OR_INF", "nan", step=3)
    ordered = sort_findings([consequence, cause])
    assert [f.code for f in ordered] == ["VANISHING_GRADIENT", "COLLAPSED_ACTIVATIONS"]
    assert ordered[0].step == 8 and ordered[1].explained_by == "VANISHING_GRADIENT"
    chain = sort_findings([Finding("LR_TOO_HIGH", "rate", step=20),
                           Finding("EXPLODING_GRADIENT", "grad", step=10), nan])
    steps = {f.code: f.step for f in chain}
    assert steps == {"LR_TOO_HIGH": 3, "EXPLODING_GRADIENT": 3, "NAN_OR_INF": 3}
    for f in chain:
        if f.explained_by:
            assert steps[f.explained_by] <= f.step
