"""The gradient check's bookkeeping: its report, its cost, the kinks it watches, and when a
tensor is inconclusive rather than wrong (lesson.checks.gradcheck)."""
from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np
import pytest
import torch
from torch import nn

from lesson.checks.gradcheck import (GradientCheckReport, ParamCheck, _PieceRecorder,
                                     findings_for, gradient_check_report,
                                     numerical_gradient_check)


def printed(report: GradientCheckReport) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        report.print()
    return out.getvalue()


def test_the_check_costs_one_pass_and_two_per_tensor():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 2))
    x, y = torch.randn(4, 10), torch.tensor([0, 1, 0, 1])
    report = gradient_check_report(model, x, y, nn.CrossEntropyLoss())
    assert report.forward_passes == 1 + 2 * 4
    assert [p.attempts for p in report.params] == [1, 1, 1, 1]


def test_the_report_says_pass_round_off_or_fail_and_notes_kinks_and_directions():
    ok = ParamCheck("0.weight", (2,), 1e-9, 1.0, 1.0, passed=True)
    assert "PASS: Gradients match" in printed(GradientCheckReport([ok], 3))
    round_off = ParamCheck("0.bias", (2,), 0.5, 1e-12, 2e-12, passed=True)
    text = printed(GradientCheckReport([round_off], 3))
    assert "round-off" in text and "Gradients match" not in text
    kink = ParamCheck("1.weight", (2,), 0.9, 1.0, 0.1, passed=True, attempts=4, on_kink=True)
    report = GradientCheckReport([ok, kink], 11)
    assert report.max_rel_diff == 1e-9                     # the kink is left out
    text = printed(report)
    assert "1.weight: max_rel_diff=9.00e-01 [OK] (on a kink: inconclusive)" in text
    assert "NOTE: 1.weight sit on a kink" in text and "PASS: Gradients match" in text
    bad = ParamCheck("2.weight", (2,), 0.5, 1.0, 2.0, passed=False, attempts=2)
    text = printed(GradientCheckReport([ok, bad], 7))
    assert "2.weight: max_rel_diff=5.00e-01 [MISMATCH] (2 directions)" in text
    assert "FAIL: Gradient mismatch in 2.weight" in text and "PASS" not in text
    assert "0.weight: max_rel_diff=1.00e-09 [OK]\n" in text


def test_a_tensor_whose_every_step_crosses_a_kink_is_inconclusive_after_four_directions():
    theta = np.array([0.3, -0.2])
    calls = iter(range(1000))

    def f():                                   # a new piece at every evaluation
        return float(theta.sum()), np.array([next(calls)])
    checks = numerical_gradient_check(f, [theta], [np.array([5.0, 5.0])], ["w"],
                                      piece0=np.array([-1]))
    assert checks[0].on_kink and checks[0].passed and checks[0].attempts == 4
    assert findings_for(checks) == []


def test_a_single_failing_tensor_has_no_note_about_earlier_layers():
    bad = ParamCheck("2.weight", (2,), 0.5, 1.0, 2.0, passed=False, attempts=2)
    [f] = findings_for([ParamCheck("0.weight", (2,), 0.0, 1.0, 1.0, True), bad])
    assert "tensors fail" not in f.message and f.evidence["directions"] == 2


def _pieces(module: nn.Module, x: list[float]) -> list[int]:
    model = nn.Sequential(module)
    recorder = _PieceRecorder(model)
    try:
        with torch.no_grad():
            model(torch.tensor([x]))
        return recorder.take().tolist()
    finally:
        recorder.remove()


@pytest.mark.parametrize("module, x, pieces", [
    (nn.ReLU(), [-0.5, 0.0, 0.5], [0, 0, 1]),
    (nn.PReLU(), [-0.5, 0.5], [0, 1]),
    (nn.ReLU6(), [5.5, 6.5], [1, 1] + [0, 1]),
    (nn.Hardsigmoid(), [-3.5, -2.5, 2.5, 3.5], [0, 1, 1, 1] + [0, 0, 0, 1]),
    (nn.Hardswish(), [-3.5, -2.5, 2.5, 3.5], [0, 1, 1, 1] + [0, 0, 0, 1]),
    (nn.Hardtanh(-2.0, 2.0), [-2.5, 1.5, 2.5], [0, 1, 1] + [0, 0, 1]),
])
def test_each_activation_notes_the_side_of_each_of_its_kinks(module, x, pieces):
    assert _pieces(module, x) == pieces


def test_a_max_pool_notes_which_input_wins_each_window():
    assert _pieces(nn.MaxPool1d(2), [[1.0, 2.0, 4.0, 3.0]]) == [1, 2]
    assert _pieces(nn.AdaptiveMaxPool1d(1), [[1.0, 5.0, 4.0]]) == [1]
