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


# -- edges: each condition of the verdict and of diagnose_failure at its threshold ------------

from lesson.checks.overfit import _baseline_loss, _is_classification, accuracy, diagnose_failure


def _frozen_logit_model(margin: float) -> nn.Module:
    """Two classes, logits (margin, 0) for every input: cross-entropy log(1 + e^-margin) on
    class 0, and a learning rate so small that training leaves it there."""
    model = nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([margin, 0.0]))
    return model


@pytest.mark.parametrize("loss, passes", [(0.09, True), (0.11, False)])
def test_classification_passes_at_full_accuracy_below_the_lessons_0_1(loss, passes):
    margin = -math.log(math.exp(loss) - 1)
    result = overfit_one_batch(_frozen_logit_model(margin), torch.ones(8, 1),
                               torch.zeros(8, dtype=torch.long), CE, lr=1e-12, steps=3,
                               verbose=False)
    assert result.final_accuracy == 1.0 and result.final_loss == pytest.approx(loss, rel=1e-3)
    assert bool(result) is passes


def test_regression_is_judged_against_predicting_the_mean_even_for_small_targets():
    """Targets of scale 0.1 (predicting their mean costs under 0.01): a line through a wave
    is no fit, however small its loss in absolute terms."""
    torch.manual_seed(0)
    x = torch.randn(64, 1)
    y = 0.1 * torch.sin(3 * x)
    result = overfit_one_batch(nn.Linear(1, 1), x, y, nn.MSELoss(), steps=300, verbose=False)
    assert 1e-4 < result.final_loss < 0.01
    assert not result and result.task == "regression"


def test_the_lessons_signature_and_its_defaults():
    import inspect

    params = inspect.signature(overfit_one_batch).parameters
    assert list(params)[:6] == ["model", "x_batch", "y_batch", "criterion", "lr", "steps"]
    assert params["lr"].default == 0.01 and params["steps"].default == 200


def test_learning_rate_and_steps_at_their_edges():
    x, y = _data()
    for lr in (0.0, -1.0):
        with pytest.raises(ValueError, match="lr must be positive"):
            overfit_one_batch(_mlp(), x[:8], y[:8], CE, lr=lr)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)     # the rate is the optimizer's then
    assert overfit_one_batch(model, x[:8], y[:8], CE, lr=0.0, optimizer=opt, steps=1,
                             verbose=False).losses        # and one step is a test
    assert len(overfit_one_batch(_mlp(), x[:8], y[:8], CE, steps=1, verbose=False).losses) == 1


def test_progress_is_printed_every_50_steps_and_only_when_verbose(capsys):
    x, y = _data()
    overfit_one_batch(_mlp(), x[:8], y[:8], CE, steps=101)
    steps = [line.split("|")[0].split()[-1] for line in capsys.readouterr().out.splitlines()
             if line.strip().startswith("Step")]
    assert steps == ["0", "50", "100"]
    overfit_one_batch(_mlp(), x[:8], y[:8], CE, steps=101, verbose=False)
    assert capsys.readouterr().out == ""


def test_the_pass_line_shows_accuracy_for_classification_only(capsys):
    x, y = _data()
    assert overfit_one_batch(_mlp(), x[:16], y[:16], CE)
    assert "(accuracy 100%)" in capsys.readouterr().out
    torch.manual_seed(0)
    xr = torch.randn(16, 3)
    assert overfit_one_batch(nn.Linear(3, 1), xr, xr.sum(1, keepdim=True), nn.MSELoss(),
                             lr=0.1, steps=300)
    out = capsys.readouterr().out
    assert "PASS" in out and "accuracy" not in out.split("PASS")[1]


def test_accuracy_of_one_logit_per_sample():
    bce = nn.BCEWithLogitsLoss()
    y = torch.tensor([0.0, 1.0, 0.0, 1.0])
    assert float(accuracy(torch.tensor([-0.5, 0.5, 0.0, 2.0]), y, bce)) == 1.0   # 0 is class 0
    assert float(accuracy(torch.tensor([[-0.5], [0.5], [0.0], [2.0]]), y, bce)) == 1.0
    probs = torch.tensor([0.4, 0.6, 0.5, 0.9])                  # BCELoss: probabilities
    assert float(accuracy(probs, y, nn.BCELoss())) == 1.0


def test_a_hand_written_criterion_on_one_output_per_sample_is_regression():
    out, y = torch.zeros(4), torch.tensor([0, 1, 2, 3])
    assert not _is_classification(out, y, lambda o, t: ((o - t) ** 2).mean())
    assert _is_classification(torch.zeros(4, 3), y, lambda o, t: o.sum())


def test_the_baseline_predicts_each_output_columns_own_mean():
    y = torch.tensor([[0.0, 10.0], [2.0, 10.0], [0.0, 12.0], [2.0, 12.0]])
    assert _baseline_loss(torch.zeros(4, 2), y, nn.MSELoss(), 99.0) == pytest.approx(1.0)


# diagnose_failure on hand-made curves: (losses, grad norms, params moved, final loss)

def _code(losses: list[float], final: float | None = None, moved: bool = True) -> str:
    final = losses[-1] if final is None else final
    return diagnose_failure(losses, [1.0] * len(losses), moved, final)[0].code


def test_a_final_loss_5_percent_above_the_first_is_lr_too_high():
    flat = [1.0] * 20
    assert _code(flat, final=1.06) == "LR_TOO_HIGH"
    assert _code(flat, final=1.04) == "UNDERFITTING"


def test_a_spike_over_3x_the_first_loss_is_lr_too_high_from_10_steps():
    spiked = [1.0, 3.01] + [0.9] * 8                       # 10 steps
    assert _code(spiked) == "LR_TOO_HIGH"
    assert _code(spiked[:9]) != "LR_TOO_HIGH"                # 9 steps: a start-up wobble
    assert _code([1.0, 3.0] + [0.9] * 8) != "LR_TOO_HIGH"    # exactly 3x is not over it


def test_the_first_loss_is_the_reference():
    # the first loss is 1; the second is 10: judged against 1, the final 1.2 is a rise
    evidence = diagnose_failure([1.0, 10.0, 1.2, 1.2], [1.0] * 4, True, 1.2)[0]
    assert evidence.code == "LR_TOO_HIGH" and evidence.evidence["initial_loss"] == 1.0
    assert evidence.evidence["rising_steps"] == pytest.approx(1 / 3)


def test_still_falling_needs_a_net_fall_a_falling_tail_and_few_rises():
    steady = [1.0 - 0.04 * i for i in range(20)]
    assert _code(steady) == "LR_TOO_LOW"
    assert _code([1.0, 1.2, 1.1, 1.0]) == "UNDERFITTING"      # the tail falls, no net fall
    zigzag = [1.0 - 0.02 * i + (0.05 if i % 2 else 0.0) for i in range(21)]   # half rise
    assert _code(zigzag) == "UNDERFITTING"
    plateau = [1.0 - 0.04 * i for i in range(16)] + [0.4] * 4    # the last fifth flat
    assert _code(plateau) == "UNDERFITTING"


def test_the_first_non_finite_step_is_named():
    losses = [1.0, 0.5, float("nan"), float("nan")]
    (f,) = diagnose_failure(losses, [1.0] * 4, True, float("nan"))
    assert f.code == "NAN_OR_INF" and f.step == 2 and f.evidence["first_nonfinite_step"] == 2
