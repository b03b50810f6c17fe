"""The NumPy mini-framework of exercise 5 trains, and its gradient check finds the bug."""
import numpy as np
import pytest

from lesson.checks.gradcheck import numerical_gradient_check
from lesson.checks.miniframework import (SGD, Linear, ReLU, Sequential, SoftmaxCrossEntropy,
                                  gradient_check)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng, rng.standard_normal((16, 4)), rng.integers(0, 3, 16)


def _model(rng, bug=None):
    return Sequential(Linear(4, 8, rng=rng), ReLU(), Linear(8, 8, bug=bug, rng=rng), ReLU(),
                      Linear(8, 3, rng=rng))


def test_correct_framework_passes_and_trains():
    rng, x, y = _data()
    model, loss_fn = _model(rng), SoftmaxCrossEntropy()
    report = gradient_check(model, loss_fn, x, y)
    assert report.passed and report.findings == [] and report.max_rel_diff < 1e-6
    opt = SGD(model.parameters(), lr=0.3)
    first = None
    for _ in range(400):
        loss = loss_fn.forward(model.forward(x), y)
        first = first if first is not None else loss
        model.zero_grad()
        model.backward(loss_fn.backward())
        opt.step()
    assert loss < 0.05 * first
    assert (model.forward(x).argmax(1) == y).all()


@pytest.mark.parametrize("seed", range(5))
def test_transposed_weight_is_found_and_named(seed):
    rng, x, y = _data(seed)
    report = gradient_check(_model(rng, bug="transposed_weight"), SoftmaxCrossEntropy(), x, y,
                            seed=seed)
    assert report.failing == ["2.weight"]
    assert report.findings[0].code == "GRADIENT_MISMATCH"
    assert report.findings[0].evidence["parameter"] == "2.weight"


def test_check_puts_parameters_back_exactly():
    rng, x, y = _data()
    model = _model(rng)
    before = [p.data.copy() for p in model.parameters()]
    gradient_check(model, SoftmaxCrossEntropy(), x, y)
    assert all(np.array_equal(b, p.data) for b, p in zip(before, model.parameters()))


def test_transposed_bug_needs_a_square_weight():
    with pytest.raises(ValueError, match="square"):
        Linear(4, 8, bug="transposed_weight")
    with pytest.raises(ValueError, match="unknown bug"):
        Linear(4, 4, bug="nope")


def test_numerical_gradient_check_on_a_plain_function():
    a = np.array([1.0, -2.0, 3.0])
    b = np.array([[0.5, 0.1], [0.2, -0.3]])

    def f():
        return float((a ** 2).sum() + np.sin(b).sum())

    good = numerical_gradient_check(f, [a, b], [2 * a, np.cos(b)], ["a", "b"])
    assert all(c.passed for c in good)
    wrong = np.cos(b)
    wrong[1, 1] *= -1
    bad = numerical_gradient_check(f, [a, b], [2 * a, wrong], ["a", "b"])
    assert [c.name for c in bad if not c.passed] == ["b"]
    with pytest.raises(ValueError):
        numerical_gradient_check(f, [a], [2 * a, b])


# -- edges: the layers' conventions and the check's bookkeeping --------------------------------

def test_linear_starts_like_torch_and_reproducibly():
    n_in = 16
    a = Linear(n_in, 32, rng=np.random.default_rng(3))
    b = Linear(n_in, 32, rng=np.random.default_rng(3))
    assert np.array_equal(a.weight.data, b.weight.data) and np.array_equal(a.bias.data,
                                                                           b.bias.data)
    bound = 1 / np.sqrt(n_in)                       # U(-1/sqrt(n_in), 1/sqrt(n_in))
    for values in (a.weight.data, a.bias.data):
        assert np.abs(values).max() <= bound and values.min() < 0 < values.max()
    assert Linear(2, 2).weight.data.shape == (2, 2)   # no rng: a fresh one


def test_relu_is_zero_below_and_at_zero_and_passes_no_gradient_there():
    relu = ReLU()
    out = relu.forward(np.array([[-2.0, 0.0, 3.0]]))
    assert out.tolist() == [[0.0, 0.0, 3.0]]
    assert relu.backward(np.ones((1, 3))).tolist() == [[0.0, 0.0, 1.0]]    # relu'(0) = 0


def test_cross_entropy_of_large_logits_does_not_overflow():
    loss_fn = SoftmaxCrossEntropy()
    assert loss_fn.forward(np.array([[1000.0, 0.0]]), np.array([0])) == pytest.approx(0.0)
    assert loss_fn.forward(np.array([[0.0, 0.0]]), np.array([1])) == pytest.approx(np.log(2))


def test_a_model_without_relu_is_checked_and_its_passes_counted():
    rng, x, y = _data()
    model = Sequential(Linear(4, 3, rng=rng))
    calls = []
    forward = model.forward
    model.forward = lambda inputs: calls.append(1) or forward(inputs)
    report = gradient_check(model, SoftmaxCrossEntropy(), x, y)
    assert report.passed and report.findings == []
    assert not any(p.on_kink for p in report.params)      # no ReLU, no kink to cross
    assert report.forward_passes == len(calls) > 1


def test_sgd_steps_against_the_gradient_by_default():
    rng, x, y = _data()
    model, loss_fn = _model(rng), SoftmaxCrossEntropy()
    before = loss_fn.forward(model.forward(x), y)
    model.zero_grad()
    model.backward(loss_fn.backward())
    SGD(model.parameters()).step()
    assert loss_fn.forward(model.forward(x), y) < before
