"""Overfit-one-batch: passes healthy models, and says why when it fails."""
import io
import math
from contextlib import redirect_stdout

import pytest
import torch
from torch import nn

from lesson.checks.overfit import OverfitResult, overfit_one_batch

CE = nn.CrossEntropyLoss()


def _data(seed=42):
    torch.manual_seed(seed)
    x = torch.randn(64, 10)
    return x, (x[:, 0] > 0).long()


def _mlp(seed=0, out=2):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, out))


class _FlipGrad(torch.autograd.Function):
    """Identity forward, negated backward: training climbs the loss (a sign bug)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad


class _SignBug(nn.Module):
    def forward(self, x):
        return _FlipGrad.apply(x)


def test_lesson_snippet_passes_and_prints_progress():
    x, y = _data()
    out = io.StringIO()
    with redirect_stdout(out):
        result = overfit_one_batch(_mlp(), x[:8], y[:8], CE)
    assert isinstance(result, OverfitResult) and bool(result) is True
    assert result.final_accuracy == 1.0 and result.final_loss < 0.01
    assert result.task == "classification" and result.findings == []
    assert "PASS" in out.getvalue() and "Step 199" in out.getvalue()


def test_trains_nothing_of_the_callers():
    x, y = _data()
    model = _mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    overfit_one_batch(model, x[:8], y[:8], CE, verbose=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training


def test_regression_fits_to_near_zero():
    torch.manual_seed(0)
    x = torch.randn(16, 5)
    y = 10 * torch.randn(16, 1) + 3
    model = nn.Sequential(nn.Linear(5, 64), nn.ReLU(), nn.Linear(64, 1))
    result = overfit_one_batch(model, x, y, nn.MSELoss(), steps=300, verbose=False)
    assert result and result.task == "regression" and result.final_accuracy is None
    assert result.final_loss < 0.01 * y.var().item()


def test_binary_logit_output():
    x, y = _data()
    model = _mlp(out=1)
    result = overfit_one_batch(model, x[:8], y[:8].float().unsqueeze(1), nn.BCEWithLogitsLoss(),
                               verbose=False)
    assert result and result.final_accuracy == 1.0


def test_model_too_small_is_underfitting():
    torch.manual_seed(0)
    x = torch.randn(32, 2)
    y = torch.randint(0, 4, (32,))  # random labels, 2 inputs, a linear model: cannot fit
    result = overfit_one_batch(nn.Linear(2, 4), x, y, CE, verbose=False)
    assert not result and result.final_accuracy < 1.0
    assert [f.code for f in result.findings] == ["UNDERFITTING"]
    assert result.findings[0].evidence["params_moved"] is True


def test_optimizer_not_connected_is_underfitting_with_unmoved_params():
    x, y = _data()
    model = _mlp()
    optimizer = torch.optim.Adam(nn.Linear(3, 3).parameters(), lr=0.01)  # the wrong model's
    result = overfit_one_batch(model, x[:8], y[:8], CE, optimizer=optimizer, verbose=False)
    assert not result
    assert result.final_loss == pytest.approx(result.initial_loss)  # nothing trained
    finding = result.findings[0]
    assert finding.code == "UNDERFITTING" and finding.evidence["params_moved"] is False
    assert "not connected" in finding.message


def test_sign_bug_makes_the_loss_rise():
    x, y = _data()
    model = nn.Sequential(_mlp(), _SignBug())
    result = overfit_one_batch(model, x[:8], y[:8], CE, verbose=False)
    assert not result and result.final_loss > 10 * result.initial_loss
    assert [f.code for f in result.findings] == ["LR_TOO_HIGH"]
    assert "wrong sign" in result.findings[0].message


def test_huge_learning_rate_makes_the_loss_rise():
    x, y = _data()
    optimizer = None
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=500.0)
    result = overfit_one_batch(model, x[:8], y[:8], CE, optimizer=optimizer, verbose=False)
    assert not result
    assert result.findings[0].code in {"LR_TOO_HIGH", "NAN_OR_INF"}
    assert max(result.losses) > 3 * result.initial_loss


def test_nan_loss_is_numerics():
    class LogOfLogits(nn.Module):
        def forward(self, x):
            return torch.log(x)  # negative logits -> NaN

    x, y = _data()
    result = overfit_one_batch(nn.Sequential(_mlp(), LogOfLogits()), x[:8], y[:8], CE,
                               verbose=False)
    assert not result and math.isnan(result.initial_loss)
    assert result.findings[0].code == "NAN_OR_INF"
    assert result.findings[0].evidence["first_nonfinite_step"] == 0


def test_graph_cut_is_no_gradient():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(10, 2)
            self.scale = nn.Parameter(torch.ones(()))

        def forward(self, x):
            return (self.lin(x) * self.scale).detach().requires_grad_()

    x, y = _data()
    result = overfit_one_batch(Detached(), x[:8], y[:8], CE, verbose=False)
    assert not result and result.findings[0].code == "NO_GRADIENT"


def test_too_few_steps_is_reported_as_still_falling():
    x, y = _data()
    result = overfit_one_batch(_mlp(), x[:32], y[:32], CE, lr=1e-4, steps=60, verbose=False)
    assert not result
    assert result.findings[0].code == "LR_TOO_LOW"


def test_bad_inputs_are_clear_errors():
    x, y = _data()
    with pytest.raises(TypeError, match="nn.Module"):
        overfit_one_batch(lambda t: t, x[:8], y[:8], CE)
    with pytest.raises(ValueError, match="empty"):
        overfit_one_batch(_mlp(), x[:0], y[:0], CE)
    with pytest.raises(ValueError, match="differ in length"):
        overfit_one_batch(_mlp(), x[:8], y[:4], CE)
    with pytest.raises(ValueError, match="steps"):
        overfit_one_batch(_mlp(), x[:8], y[:8], CE, steps=0)
    with pytest.raises(ValueError, match="no trainable"):
        overfit_one_batch(nn.ReLU(), x[:8], y[:8], CE)
