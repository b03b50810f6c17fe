"""locate_nonfinite: each NaN source is named with its operation, module and pass."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lesson.data.nonfinite import locate_nonfinite


class NaiveSoftmax(nn.Module):
    """softmax without subtracting the row maximum: exp overflows for large logits."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        e = torch.exp(z)
        return e / e.sum(dim=1, keepdim=True)


class OverflowNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.softmax = NaiveSoftmax()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(self.fc(x) * 100)


class SharpSoftmaxNet(nn.Module):
    """A safe softmax, but so sharp that some probabilities are exactly 0."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(x) * 1000, dim=1)


def nll_without_clamp(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A hand-written cross-entropy on probabilities with no clamp before log."""
    return -torch.log(p[torch.arange(len(y)), y]).mean()


class NllWithoutClamp(nn.Module):
    def forward(self, p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nll_without_clamp(p, y)


class Standardize(nn.Module):
    """Hand-written normalisation with no epsilon: a constant batch has std 0."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h - h.mean(0)) / h.std(0)


class EpsOutsideSqrt(nn.Module):
    """eps added outside the sqrt: the forward pass is finite, the gradient of sqrt(0) is not."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        c = h - h.mean(0)
        return c / (torch.sqrt((c ** 2).mean(0)) + 1e-5)


class WithNorm(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(x))


class InlineNorm(nn.Module):
    """The same bug written in the parent's own forward, between two child layers."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 5)
        self.fc2 = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        c = h - h.mean(0)
        h = c / (torch.sqrt((c ** 2).mean(0)) + 1e-5)
        return self.fc2(h)


class SqrtOfNegative(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(self.fc(x) - 1e3)


def batch(seed: int = 0, scale: float = 10.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 4, generator=g) * scale, torch.randint(0, 3, (8,), generator=g)


def only(findings):
    assert len(findings) == 1, findings
    json.dumps(findings[0].to_dict())  # evidence is plain JSON
    return findings[0]


def test_exp_overflow_named_in_the_forward_pass_where_detect_anomaly_names_a_later_op():
    torch.manual_seed(0)
    model, (x, y) = OverflowNet(), batch()
    assert torch.isnan(nll_without_clamp(model(x), y))  # the symptom

    f = only(locate_nonfinite(model, x, y, nll_without_clamp))
    assert f.code == "EXP_OVERFLOW"
    assert f.layer == "softmax"
    assert f.evidence["op"] == "aten.exp" and f.evidence["phase"] == "forward"
    assert f.evidence["max_input"] > 88.7  # exp(88.7) is float32's largest finite value
    assert f.evidence["inf_count"] > 0 and not f.evidence["loss_finite"]

    # detect_anomaly only checks backward functions: it blames the log in the loss, which
    # merely passed the NaN on, and never the exp that created it.
    with warnings.catch_warnings(), pytest.raises(RuntimeError) as err:
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            nll_without_clamp(model(x), y).backward()
    assert "returned nan" in str(err.value)
    assert "ExpBackward0" not in str(err.value) and "LogBackward0" in str(err.value)


@pytest.mark.parametrize("criterion", [nll_without_clamp, NllWithoutClamp()])
def test_log_of_zero_in_a_handwritten_loss(criterion):
    torch.manual_seed(1)
    model, (x, y) = SharpSoftmaxNet(), batch(1)
    assert not torch.isfinite(criterion(model(x), y))

    f = only(locate_nonfinite(model, x, y, criterion))
    assert f.code == "LOG_OF_ZERO"
    assert f.layer == "criterion"
    assert f.evidence["op"] == "aten.log"
    assert f.evidence["zeros_in_input"] > 0 and f.evidence["negatives_in_input"] == 0


def test_log_of_negative_is_log_of_zero_too():
    class LogOfLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return torch.log(self.fc(x))

    torch.manual_seed(2)
    x, y = batch(2)
    f = only(locate_nonfinite(LogOfLinear(), x, y, nn.CrossEntropyLoss()))
    assert f.code == "LOG_OF_ZERO" and f.layer == "LogOfLinear"
    assert f.evidence["negatives_in_input"] > 0 and f.evidence["nan_count"] > 0


def test_division_by_zero_on_a_constant_batch():
    torch.manual_seed(3)
    model = WithNorm(Standardize())
    x, y = torch.ones(8, 4), batch(3)[1]
    assert torch.isnan(F.cross_entropy(model(x), y))

    f = only(locate_nonfinite(model, x, y, nn.CrossEntropyLoss()))
    assert f.code == "DIVISION_BY_ZERO"
    assert f.layer == "norm"
    assert f.evidence["op"] == "aten.div" and f.evidence["phase"] == "forward"
    assert f.evidence["zeros_in_denominator"] == 3


def test_nan_born_in_the_backward_pass_is_found_there():
    torch.manual_seed(4)
    model = WithNorm(EpsOutsideSqrt())
    x, y = torch.ones(8, 4), batch(4)[1]
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    assert torch.isfinite(loss)  # the forward pass looks healthy...
    assert torch.isnan(model.fc.weight.grad).all()  # ...the gradients are NaN
    model.zero_grad(set_to_none=True)

    f = only(locate_nonfinite(model, x, y, nn.CrossEntropyLoss()))
    assert f.code == "DIVISION_BY_ZERO"
    assert f.layer == "norm"
    assert f.evidence["phase"] == "backward"
    assert f.evidence["backward_of"] == "SqrtBackward0"
    assert f.evidence["loss_finite"] is True
    assert set(f.evidence["nonfinite_grads"]) == {"fc.weight", "fc.bias"}
    assert "sqrt(x + eps)" in f.advice


def test_backward_op_in_the_parents_own_forward_is_named_after_the_parent():
    torch.manual_seed(5)
    x, y = torch.ones(8, 4), batch(5)[1]
    f = only(locate_nonfinite(InlineNorm(), x, y, nn.CrossEntropyLoss()))
    assert f.code == "DIVISION_BY_ZERO" and f.evidence["phase"] == "backward"
    assert f.layer == "InlineNorm"  # not fc1 or fc2, the layers on either side


def test_other_sources_are_nan_or_inf_with_the_op_name():
    torch.manual_seed(6)
    x, y = batch(6, scale=1.0)
    f = only(locate_nonfinite(SqrtOfNegative(), x, y, nn.CrossEntropyLoss()))
    assert f.code == "NAN_OR_INF"
    assert f.evidence["op"] == "aten.sqrt" and "aten.sqrt" in f.message


def test_nonfinite_batch_is_reported_before_running():
    x, y = batch(7)
    x[3, 1], x[5, 0], x[5, 2] = float("nan"), float("inf"), float("-inf")
    f = only(locate_nonfinite(nn.Linear(4, 3), x, y, nn.CrossEntropyLoss()))
    assert f.code == "NONFINITE_INPUT"
    assert f.evidence["nan_count"] == 1 and f.evidence["inf_count"] == 2
    assert f.evidence["rows_affected"] == 2 and f.evidence["first_indices"] == [3, 5]


def test_nonfinite_parameter_is_reported():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")
    f = only(locate_nonfinite(model, *batch(8), nn.CrossEntropyLoss()))
    assert f.code == "NAN_OR_INF" and f.layer == "2"
    assert f.evidence["tensors"] == ["2.weight"]


def test_a_masked_inf_that_does_no_harm_is_not_reported():
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            z = self.fc(x)
            return z.masked_fill(torch.arange(3) == 2, float("-inf"))

    x, y = batch(9)
    assert locate_nonfinite(Masked(), x, y % 2, nn.CrossEntropyLoss()) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_model_gives_nothing_and_is_left_untouched(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    model.train()
    model[0].weight.grad = torch.full_like(model[0].weight, 7.0)  # the user's own gradient
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = batch(seed, scale=1.0)

    assert locate_nonfinite(model, x, y, nn.CrossEntropyLoss()) == []

    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running stats included
    assert torch.equal(model[0].weight.grad, torch.full_like(model[0].weight, 7.0))
    assert model[3].weight.grad is None and model.training


def test_model_is_restored_after_a_nan_run():
    torch.manual_seed(10)
    model = OverflowNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    locate_nonfinite(model, *batch(10), nll_without_clamp)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_an_error_inside_forward_propagates_and_leaves_no_hooks_behind():
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x[:, :2])  # wrong width

    model = Broken()
    before = [t.clone() for t in model.parameters()]
    with pytest.raises(RuntimeError):
        locate_nonfinite(model, *batch(11), nn.CrossEntropyLoss())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    x, y = batch(11)
    assert torch.isfinite(nn.CrossEntropyLoss()(nn.Linear(4, 3)(x), y))  # dispatch mode is gone


def test_bad_arguments_raise_clear_errors():
    x, y = batch()
    with pytest.raises(TypeError, match="nn.Module"):
        locate_nonfinite(lambda t: t, x, y, nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match="differ in length"):
        locate_nonfinite(nn.Linear(4, 3), x, y[:3], nn.CrossEntropyLoss())
    with pytest.raises(TypeError, match="criterion"):
        locate_nonfinite(nn.Linear(4, 3), x, y, "cross_entropy")
