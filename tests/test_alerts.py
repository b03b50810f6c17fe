"""Alerts turn the first bad record into a finding and apply their policy."""
from __future__ import annotations

import logging
import math

import pytest

from lesson.production.alerts import (DeadUnitsAlert, ExplodingGradientAlert, FindingAlert,
                           NonFiniteLossAlert, TrainingAlert, default_alerts)
from lesson.findings import Finding, Severity


def record(step: int, *, loss: float = 0.5, dead: float | None = 0.1, grad: float = 1.0,
           nonfinite: int = 0, nonfinite_grad: int = 0) -> dict:
    return {
        "step": step, "loss": loss, "lr": 0.1,
        "layers": {"0": {"kind": "Linear", "act_mean": 0.0, "act_std": 1.0, "act_min": -1.0,
                         "act_max": 1.0, "zero_fraction": 0.0, "dead_fraction": None,
                         "sample_std": 1.0, "nonfinite": 0},
                   "1": {"kind": "ReLU", "act_mean": 0.1, "act_std": 0.2, "act_min": 0.0,
                         "act_max": 1.0, "zero_fraction": 0.9, "dead_fraction": dead,
                         "sample_std": 0.1, "nonfinite": nonfinite},
                   "2": {"kind": "Linear", "act_mean": 0.0, "act_std": 1.0, "act_min": -1.0,
                         "act_max": 1.0, "zero_fraction": 0.0, "dead_fraction": None,
                         "sample_std": 1.0, "nonfinite": nonfinite}},
        "params": {"0.weight": {"grad_norm": grad, "weight_norm": 3.0, "update_ratio": 1e-3,
                                "nonfinite_grad": nonfinite_grad},
                   "2.weight": {"grad_norm": 0.5, "weight_norm": 2.0, "update_ratio": 1e-3,
                                "nonfinite_grad": 0}},
    }


def test_healthy_records_raise_nothing():
    alerts = default_alerts("raise")
    for step in range(0, 500, 10):
        for alert in alerts:
            assert alert(record(step, grad=1.0 + step / 100)) == []


def test_nan_loss_raises_naming_step_layer_and_evidence():
    alert = NonFiniteLossAlert("raise")
    alert(record(0))
    with pytest.raises(TrainingAlert) as info:
        alert(record(30, loss=math.nan, nonfinite=7))
    err = info.value
    assert err.code == "NAN_OR_INF" and err.step == 30 and err.layer == "1"
    assert math.isnan(err.evidence["loss"]) and err.evidence["first_layer_nonfinite_values"] == 7
    assert "step 30" in str(err) and "'1'" in str(err) and "first_layer_nonfinite_values=7" in str(err)


def test_inf_loss_without_bad_layers_names_the_whole_model():
    with pytest.raises(TrainingAlert, match="whole model") as info:
        NonFiniteLossAlert("raise")(record(5, loss=math.inf))
    assert info.value.layer is None and info.value.evidence["loss"] == math.inf


def test_dead_layer_over_80_percent_warns_once(caplog):
    alert = DeadUnitsAlert()  # warn is the default policy
    with caplog.at_level(logging.WARNING, logger="lesson.production.alerts"):
        assert alert(record(0, dead=0.8)) == []  # "more than 80%"
        first = alert(record(10, dead=0.85))
        again = alert(record(20, dead=0.9))
    assert [f.code for f in first] == ["DEAD_NEURONS"] and first[0].layer == "1"
    assert first[0].evidence["dead_fraction"] == 0.85 and first[0].step == 10
    assert again == []
    assert len(caplog.records) == 1 and "DEAD_NEURONS at step 10" in caplog.text
    one_sample = record(30, dead=0.95)
    one_sample["layers"]["1"]["samples"] = 1  # one sample: "dead" means nothing yet
    assert DeadUnitsAlert("raise")(one_sample) == []


def test_callable_policy_receives_the_finding():
    got: list[Finding] = []
    alert = ExplodingGradientAlert(got.append, max_norm=100.0, once=False)
    alert(record(0, grad=5.0))
    alert(record(10, grad=500.0))
    alert(record(20, grad=math.inf))
    alert(record(30, grad=3.0, nonfinite_grad=2))
    assert [(f.step, f.layer) for f in got] == [(10, "0.weight"), (20, "0.weight"),
                                               (30, "0.weight")]
    assert got[0].evidence["grad_norm"] == 500.0 and got[0].evidence["suggested_clip"] == 5.0


def test_gradient_growth_factor():
    got: list[Finding] = []
    alert = ExplodingGradientAlert(got.append, growth=10.0)
    for step, g in enumerate([1.0, 2.0, 3.0, 40.0]):
        alert(record(step, grad=g))
    assert len(got) == 1 and got[0].step == 3 and got[0].evidence["previous_grad_norm"] == 3.0


class FakeDebugger:
    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        self.calls = 0

    def diagnose(self) -> list[Finding]:
        self.calls += 1
        return list(self.findings)


def test_finding_alert_filters_by_severity_and_dates_findings():
    dbg = FakeDebugger([Finding("OVERFITTING", "val rises"),               # WARNING
                        Finding("LR_TOO_HIGH", "overshoot", step=40)])      # ERROR
    got: list[Finding] = []
    alert = FindingAlert(got.append, min_severity=Severity.ERROR, check_every=50).bind(dbg)
    alert(record(10))
    assert dbg.calls == 0
    alert(record(50))
    assert [f.code for f in got] == ["LR_TOO_HIGH"] and got[0].step == 40
    low = FindingAlert("raise", min_severity=Severity.WARNING, debugger=FakeDebugger(
        [Finding("OVERFITTING", "val rises")]))
    with pytest.raises(TrainingAlert, match="OVERFITTING at step 60") as info:
        low(record(60))
    assert info.value.step == 60


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        DeadUnitsAlert("shout")
    with pytest.raises(ValueError, match="threshold"):
        DeadUnitsAlert(threshold=1.5)
    with pytest.raises(TypeError, match="Severity"):
        FindingAlert(min_severity="ERROR")
    with pytest.raises(RuntimeError, match="debugger"):
        FindingAlert()(record(0))


def test_debugger_raises_at_the_step_the_loss_turns_nan():
    import torch
    from torch import nn

    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    dbg = NetworkDebugger(model, opt, criterion, every=1,
                          alerts=[NonFiniteLossAlert("raise"), DeadUnitsAlert("raise")])
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    with pytest.raises(TrainingAlert) as info:
        for step in range(10):
            xb = x.clone()
            if step == 4:
                xb[3, 1] = float("inf")  # a corrupt sample arrives
            opt.zero_grad()
            loss = criterion(model(xb), y)
            dbg.record_loss(loss.detach())
            loss.backward()
            opt.step()
    assert info.value.code == "NAN_OR_INF" and info.value.step == 4 and step == 4
    assert info.value.layer == "0"  # the first layer whose output was not finite
    assert math.isnan(dbg.loss_history[4])
    dbg.close()
