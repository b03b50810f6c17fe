"""BuggyLinear: the same forward as nn.Linear, and each bug changes the gradient it names
and nothing else (the gradient check's tests rely on that)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lesson.checks.injected_bugs import BUGS, BuggyLinear


def _grads(n_in: int, n_out: int, bug: str | None):
    """(reference grads of nn.Linear, the buggy layer's) for one batch: x, weight, bias."""
    torch.manual_seed(0)
    layer = BuggyLinear(n_in, n_out, bug=bug)
    reference = nn.Linear(n_in, n_out)
    reference.load_state_dict({"weight": layer.weight.detach(), "bias": layer.bias.detach()})
    x = torch.randn(5, n_in)
    out = []
    for model in (reference, layer):
        xi = x.clone().requires_grad_(True)
        torch.testing.assert_close(model(xi), reference(x))        # the forward is right
        (model(xi) * torch.arange(n_out)).sum().backward()
        out.append((xi.grad, model.weight.grad, model.bias.grad))
    return out


def test_without_a_bug_every_gradient_is_nn_linears():
    (rx, rw, rb), (gx, gw, gb) = _grads(4, 3, None)
    torch.testing.assert_close((gx, gw, gb), (rx, rw, rb))


@pytest.mark.parametrize("bug, wrong", [
    ("transposed_weight", lambda r: (r[0], r[1].t(), r[2])),
    ("sign_weight", lambda r: (r[0], -r[1], r[2])),
    ("factor2_weight", lambda r: (r[0], 2 * r[1], r[2])),
    ("factor2_bias", lambda r: (r[0], r[1], 2 * r[2])),
    ("sign_input", lambda r: (-r[0], r[1], r[2])),
])
def test_each_bug_changes_the_gradient_it_names(bug, wrong):
    reference, got = _grads(4, 4, bug)
    torch.testing.assert_close(got, wrong(reference))


def test_one_element_is_wrong_far_from_the_first_five():
    (rx, rw, rb), (gx, gw, gb) = _grads(4, 4, "one_element")
    torch.testing.assert_close((gx, gb), (rx, rb))
    differ = torch.nonzero((gw - rw).flatten().abs() > 1e-6).flatten().tolist()
    assert len(differ) == 1 and differ[0] >= 5


def test_bugs_are_checked_when_the_layer_is_built():
    assert set(BUGS) >= {"transposed_weight", "sign_weight", "one_element"}
    with pytest.raises(ValueError, match="unknown bug"):
        BuggyLinear(3, 3, bug="nope")
    with pytest.raises(ValueError, match="square"):
        BuggyLinear(3, 4, bug="transposed_weight")
    assert BuggyLinear(3, 4, bug="sign_weight").weight.shape == (4, 3)    # any shape else
    assert BuggyLinear(3, 4).bug is None
