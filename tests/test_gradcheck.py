"""The gradient check covers every element, names the faulty tensor, and never cries wolf."""
import io
from contextlib import redirect_stdout

import pytest
import torch
from torch import nn

from lesson.checks.gradcheck import gradient_check, gradient_check_report
from lesson.checks.injected_bugs import BUGS, BuggyLinear

CE = nn.CrossEntropyLoss()


def _data(n=16, d=10, classes=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def _buggy(bug, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 8), nn.ReLU(), BuggyLinear(8, 8, bug), nn.ReLU(),
                         nn.Linear(8, 2))


def _lesson_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 2))


def test_lesson_snippet_returns_float_and_prints_one_line_per_parameter():
    x, y = _data()
    model = _lesson_model()
    out = io.StringIO()
    with redirect_stdout(out):
        diff = gradient_check(model, x[:4], y[:4], CE)
    assert isinstance(diff, float) and diff < 1e-5
    text = out.getvalue()
    for name, _ in model.named_parameters():
        assert f"{name}: max_rel_diff=" in text
    assert "PASS" in text and "106 elements" in text


def test_uses_fewer_forward_passes_than_gradcheck_fast_mode():
    x, y = _data()
    report = gradient_check_report(_lesson_model(), x[:4], y[:4], CE)
    # torch.autograd.gradcheck(fast_mode=True) needs 10 on this model (benchmarks/bench_gradcheck.py)
    assert report.forward_passes <= 10
    assert report.elements_checked == 106


def test_callers_model_is_untouched():
    x, y = _data()
    model = _lesson_model()
    model[0].weight.requires_grad_(True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gradient_check_report(model, x, y, CE)
    assert all(p.dtype == torch.float32 and p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("bug", [b for b in BUGS if b != "sign_input"])
def test_finds_and_names_each_backward_bug(bug):
    x, y = _data()
    for seed in range(3):
        report = gradient_check_report(_buggy(bug, seed), x, y, CE, seed=seed)
        expected = "2.bias" if bug == "factor2_bias" else "2.weight"
        assert report.failing == [expected], (bug, seed, report.params)
        assert [f.code for f in report.findings] == ["GRADIENT_MISMATCH"]
        assert report.findings[0].evidence["parameter"] == expected


def test_wrong_input_gradient_flags_earlier_tensors_and_points_at_the_culprit():
    x, y = _data()
    report = gradient_check_report(_buggy("sign_input"), x, y, CE)
    assert report.failing == ["0.weight", "0.bias"]
    assert "2.weight" in report.findings[0].message


def test_single_element_bug_is_missed_by_checking_first_five_only():
    """The lesson's method perturbs elements 0..4; the bug sits at element 61 of 64."""
    x, y = _data()
    model = _buggy("one_element").double()
    w = model[2].weight
    model.zero_grad()
    CE(model(x.double()), y).backward()
    analytical = w.grad.clone().view(-1)
    flat = w.data.view(-1)
    worst_first5 = 0.0
    for i in range(5):
        orig = flat[i].item()
        flat[i] = orig + 1e-4
        plus = CE(model(x.double()), y).item()
        flat[i] = orig - 1e-4
        minus = CE(model(x.double()), y).item()
        flat[i] = orig
        num = (plus - minus) / 2e-4
        worst_first5 = max(worst_first5, abs(num - analytical[i].item())
                           / max(abs(num), abs(analytical[i].item()), 1e-8))
    assert worst_first5 < 1e-5  # the lesson's check passes this bug
    assert gradient_check_report(_buggy("one_element"), x, y, CE).failing == ["2.weight"]


@pytest.mark.parametrize("make", [
    lambda: nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 2)),
    lambda: nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)),
    lambda: nn.Sequential(nn.Linear(10, 16), nn.LeakyReLU(0.1), nn.Dropout(0.3),
                          nn.Linear(16, 2)),
    lambda: nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU6(), nn.Linear(16, 2)),
    lambda: nn.Sequential(nn.Unflatten(1, (1, 10)), nn.Conv1d(1, 4, 3), nn.ReLU(),
                          nn.MaxPool1d(2), nn.Flatten(), nn.Linear(16, 2)),
], ids=["deep-relu", "tanh", "leaky-dropout", "batchnorm-relu6", "conv-maxpool"])
def test_no_false_alarm_on_correct_models(make):
    x, y = _data(n=32)
    for seed in range(8):
        torch.manual_seed(seed)
        report = gradient_check_report(make(), x, y, CE, seed=seed)
        assert report.passed, (seed, report.params)
        assert report.findings == []


def test_relu_kinks_are_recognised_not_flagged():
    """A pre-activation at 3e-7 from the ReLU's kink: any step crosses it."""
    x, y = _data(n=8)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 4), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():  # put unit 0 of sample 0 right on the kink
        model[0].bias[0] -= (model[0](x[:1])[0, 0] - 3e-7)
    report = gradient_check_report(model, x, y, CE)
    assert report.passed and report.findings == []
    assert any(p.attempts > 1 for p in report.params)


def test_lstm_and_frozen_parameters():
    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(3, 5, batch_first=True)
            self.head = nn.Linear(5, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    torch.manual_seed(0)
    model = Seq()
    model.head.bias.requires_grad_(False)
    x = torch.randn(6, 4, 3)
    y = torch.randint(0, 2, (6,))
    report = gradient_check_report(model, x, y, CE)
    assert report.passed
    assert "head.bias" not in [p.name for p in report.params]


@pytest.mark.parametrize("args, error", [
    (("not a model", torch.randn(2, 10), torch.zeros(2, dtype=torch.long)), TypeError),
    ((nn.Linear(10, 2), torch.randn(0, 10), torch.zeros(0, dtype=torch.long)), ValueError),
    ((nn.Linear(10, 2), torch.randn(3, 10), torch.zeros(2, dtype=torch.long)), ValueError),
    ((nn.ReLU(), torch.randn(3, 10), torch.zeros(3, dtype=torch.long)), ValueError),
])
def test_bad_input_is_a_clear_error(args, error):
    with pytest.raises(error):
        gradient_check_report(*args, CE)
