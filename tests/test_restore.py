"""After overfit_one_batch, find_learning_rate and gradient_check, the model and the optimizer
are bitwise what they were (values, dtypes, requires_grad, .grad, buffers, train/eval flags,
optimizer state), also when the tool raises or is interrupted."""
import copy

import pytest
import torch
from torch import nn

from lesson.checks.gradcheck import gradient_check, gradient_check_report
from lesson.checks.lr_finder import find_learning_rate
from lesson.checks.overfit import overfit_one_batch

CE = nn.CrossEntropyLoss()


def _setup(dtype=torch.float32):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    model.to(dtype)
    model[0].bias.requires_grad_(False)  # a frozen parameter
    x = torch.randn(32, 10, dtype=dtype)
    y = (x[:, 0] > 0).long()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05,
                          momentum=0.9)
    for _ in range(2):  # give the optimizer state (momentum buffers) and leave grads behind
        opt.zero_grad()
        CE(model(x), y).backward()
        opt.step()
    model[1].eval()  # a mixed train/eval state to put back
    return model, opt, x, y


def _snapshot(model, opt):
    return {
        "params": [(n, p.detach().clone(), p.dtype, p.requires_grad,
                    None if p.grad is None else p.grad.clone())
                   for n, p in model.named_parameters()],
        "buffers": [(n, b.clone(), b.dtype) for n, b in model.named_buffers()],
        "modes": [m.training for m in model.modules()],
        "opt": copy.deepcopy(opt.state_dict()),
    }


def _assert_same(before, after):
    for (n, v, dt, rg, g), (n2, v2, dt2, rg2, g2) in zip(before["params"], after["params"]):
        assert n == n2 and dt == dt2 and rg == rg2, n
        assert torch.equal(v, v2), n
        assert (g is None) == (g2 is None) and (g is None or torch.equal(g, g2)), n
    for (n, b, dt), (_, b2, dt2) in zip(before["buffers"], after["buffers"]):
        assert dt == dt2 and torch.equal(b, b2), n
    assert before["modes"] == after["modes"]
    o1, o2 = before["opt"], after["opt"]
    assert o1["param_groups"] == o2["param_groups"]
    assert o1["state"].keys() == o2["state"].keys()
    for k in o1["state"]:
        for key, val in o1["state"][k].items():
            other = o2["state"][k][key]
            assert torch.equal(val, other) if torch.is_tensor(val) else val == other


TOOLS = {
    "overfit": lambda m, o, x, y, c: overfit_one_batch(m, x, y, c, optimizer=o, verbose=False),
    "overfit-own-adam": lambda m, o, x, y, c: overfit_one_batch(m, x, y, c, verbose=False),
    "lr_finder": lambda m, o, x, y, c: find_learning_rate(m, x, y, c, optimizer=o,
                                                          verbose=False),
    "lr_finder-adam": lambda m, o, x, y, c: find_learning_rate(m, x, y, c, optimizer="adam",
                                                               steps=30, verbose=False),
    "gradient_check": lambda m, o, x, y, c: gradient_check_report(m, x, y, c),
}


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_restored_after_a_normal_run(tool, dtype):
    model, opt, x, y = _setup(dtype)
    before = _snapshot(model, opt)
    TOOLS[tool](model, opt, x, y, CE)
    _assert_same(before, _snapshot(model, opt))


class _Boom:
    """A criterion that works `after` times, then raises `error`."""

    def __init__(self, error, after):
        self.error, self.after, self.calls = error, after, 0

    def __call__(self, out, y):
        self.calls += 1
        if self.calls > self.after:
            raise self.error
        return CE(out, y)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()],
                         ids=["exception", "ctrl-c"])
def test_restored_when_the_tool_is_interrupted(tool, error):
    model, opt, x, y = _setup()
    before = _snapshot(model, opt)
    criterion = _Boom(error, after=4)
    with pytest.raises(type(error)):
        TOOLS[tool](model, opt, x, y, criterion)
    assert criterion.calls == 5  # it really stopped in the middle
    _assert_same(before, _snapshot(model, opt))


def test_lesson_gradient_check_keeps_float32():
    """The lesson's version turned the caller's model into float64 and back in place."""
    model, opt, x, y = _setup()
    before = _snapshot(model, opt)
    gradient_check(model, x[:4], y[:4], CE)
    _assert_same(before, _snapshot(model, opt))
