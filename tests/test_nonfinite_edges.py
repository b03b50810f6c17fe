"""locate_nonfinite at its edges: what it lists, counts and blames where one condition alone
decides (a batch with NaN only, a model without parameters, gradients left from a step that
diverged, a power of zero, a loss that needs no backward)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lesson.data import nonfinite as N
from lesson.data.nonfinite import locate_nonfinite


class Fn(nn.Module):
    """A module that applies `fn` to its input: one operation to blame, nothing else."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Scaled(Fn):
    """`fn` of the input times a weight of 1: a parameter for the backward pass to reach."""

    def __init__(self, fn) -> None:
        super().__init__(fn)
        self.weight = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x * self.weight)


def mean_loss(out: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
    return out.mean()


def _y(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


@pytest.mark.parametrize("bad_rows, listed", [(N.MAX_LISTED, N.MAX_LISTED),
                                              (N.MAX_LISTED + 1, N.MAX_LISTED)])
def test_a_batch_finding_lists_at_most_max_listed_rows(bad_rows, listed):
    x = torch.zeros(20, 2)
    x[:bad_rows, 0] = float("nan")
    (f,) = locate_nonfinite(nn.Linear(2, 2), x, _y(20), nn.CrossEntropyLoss())
    assert f.evidence["first_indices"] == list(range(listed))
    assert f.evidence["rows_affected"] == bad_rows


@pytest.mark.parametrize("value, counts", [(float("nan"), (1, 0)), (float("inf"), (0, 1))])
def test_a_batch_with_only_nan_or_only_inf_is_reported(value, counts):
    x = torch.zeros(4, 2)
    x[2, 1] = value
    (f,) = locate_nonfinite(nn.Linear(2, 2), x, _y(4), nn.CrossEntropyLoss())
    assert f.code == "NONFINITE_INPUT"
    assert (f.evidence["nan_count"], f.evidence["inf_count"]) == counts


def test_a_model_with_one_parameter_tensor_is_checked():
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    (f,) = locate_nonfinite(model, torch.ones(3, 2), _y(3), nn.CrossEntropyLoss())
    assert f.code == "NAN_OR_INF" and f.evidence["tensors"] == ["weight"]


def test_the_first_broken_layer_is_named():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
        model[2].weight[0, 0] = float("nan")
    (f,) = locate_nonfinite(model, torch.ones(3, 2), _y(3), nn.CrossEntropyLoss())
    assert f.layer == "0" and f.evidence["tensors"] == ["0.weight", "2.weight"]


def test_a_model_without_parameters_is_run_and_blamed():
    x = torch.tensor([[1.0, 0.0], [2.0, 3.0]], requires_grad=True)
    (f,) = locate_nonfinite(Fn(torch.log), x, _y(2), mean_loss)
    assert f.code == "LOG_OF_ZERO" and f.layer == "Fn"
    assert f.evidence["ops_checked"] == 1          # log is the first operation it saw
    assert f.evidence["zeros_in_input"] == 1 and f.evidence["negatives_in_input"] == 0


def test_log1p_of_minus_one_is_log_of_zero():
    x = torch.tensor([[-1.0, 0.5], [-1.0, 2.0]])
    (f,) = locate_nonfinite(Fn(torch.log1p), x, _y(2), mean_loss)
    assert f.code == "LOG_OF_ZERO"
    assert f.evidence["zeros_in_input"] == 2 and f.evidence["negatives_in_input"] == 0


def test_keyword_arguments_reach_the_operation():
    """floor division turns 0.5 into 0, and the log of it is -inf: run without its
    rounding_mode the division would give 0.25 and nothing would break."""
    x = torch.tensor([[0.5, 1.5]])
    (f,) = locate_nonfinite(Fn(lambda t: torch.log(torch.div(t, 2, rounding_mode="floor"))),
                            x, _y(1), mean_loss)
    assert f.code == "LOG_OF_ZERO" and f.evidence["zeros_in_input"] == 2


def test_zero_to_a_negative_power_is_a_division_by_zero():
    x = torch.tensor([[0.0, 2.0, 3.0]])
    (f,) = locate_nonfinite(Fn(lambda t: t ** -1), x, _y(1), mean_loss)
    assert f.code == "DIVISION_BY_ZERO" and "raised 1 zeros" in f.message
    exponent = torch.tensor([-1.0, 1.0, 1.0])
    (f,) = locate_nonfinite(Fn(lambda t: torch.pow(t, exponent)), x, _y(1), mean_loss)
    assert f.code == "DIVISION_BY_ZERO"


def test_a_power_that_overflows_is_exp_overflow():
    (f,) = locate_nonfinite(Fn(lambda t: t ** 3), torch.tensor([[1e20, 1.0]]), _y(1), mean_loss)
    assert f.code == "EXP_OVERFLOW"


def test_an_inf_the_caller_asked_for_is_not_the_culprit():
    """masked_fill(mask, -inf) is asked for; the softmax of a row with nothing left is where
    the NaN is born, from an input that already held -inf: no operation is blamed."""
    def fully_masked(t):
        return torch.softmax(t.masked_fill(torch.ones_like(t, dtype=torch.bool),
                                           float("-inf")), dim=1)

    (f,) = locate_nonfinite(Fn(fully_masked), torch.ones(2, 3), _y(2), mean_loss)
    assert f.code == "NAN_OR_INF" and "masked_fill" not in f.message
    assert "no ATen operation produced them" in f.message


def test_gradients_left_by_a_diverged_step_do_not_count():
    model = nn.Linear(2, 2)
    model.weight.grad = torch.full_like(model.weight, float("nan"))
    assert locate_nonfinite(model, torch.ones(3, 2), _y(3), nn.CrossEntropyLoss()) == []
    assert torch.isnan(model.weight.grad).all()          # and they are given back


def test_a_loss_that_needs_no_backward_is_judged_on_its_value():
    model = nn.Linear(2, 2).requires_grad_(False)
    assert locate_nonfinite(model, torch.ones(3, 2), _y(3), nn.CrossEntropyLoss()) == []
    (f,) = locate_nonfinite(Fn(torch.log), torch.zeros(1, 2), _y(1), mean_loss)
    assert f.code == "LOG_OF_ZERO"


def test_a_criterion_that_returns_a_number_is_refused():
    with pytest.raises(TypeError, match="criterion must return a tensor"):
        locate_nonfinite(nn.Linear(2, 2), torch.ones(3, 2), _y(3), lambda out, y: 0.5)


def test_a_division_by_a_zero_number_is_counted():
    (f,) = locate_nonfinite(Fn(lambda t: t / 0.0), torch.ones(1, 2), _y(1), mean_loss)
    assert f.code == "DIVISION_BY_ZERO" and f.evidence["zeros_in_denominator"] == 1


def test_zero_as_a_number_to_a_negative_power():
    (f,) = locate_nonfinite(Fn(lambda t: 0.0 ** t), torch.tensor([[-1.0, 2.0]]), _y(1),
                            mean_loss)
    assert f.code == "DIVISION_BY_ZERO"


def test_a_zero_base_under_a_fractional_power_is_not_what_overflowed():
    exponent = torch.tensor([0.5, 3.0])
    (f,) = locate_nonfinite(Fn(lambda t: torch.pow(t, exponent)), torch.tensor([[0.0, 1e20]]),
                            _y(1), mean_loss)
    assert f.code == "EXP_OVERFLOW"


def test_the_sqrt_advice_is_given_for_sqrt_norm_and_pow_backwards_only():
    """acos' derivative at 1 is -1/sqrt(0): a division by zero in AcosBackward, not the
    derivative of a sqrt the user wrote."""
    (f,) = locate_nonfinite(Scaled(torch.acos), torch.tensor([[1.0, 0.5]]), _y(1), mean_loss)
    assert f.code == "DIVISION_BY_ZERO" and "AcosBackward" in f.message
    assert "epsilon inside" not in f.advice                 # the code's own advice
    (f,) = locate_nonfinite(Scaled(torch.sqrt), torch.tensor([[0.0, 4.0]]), _y(1), mean_loss)
    assert f.code == "DIVISION_BY_ZERO" and "epsilon inside" in f.advice
