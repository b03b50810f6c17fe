"""`lesson.course.learner.run_setup` on hand-made runs and set-ups: what the recorder leaves
out (a course tool's optimizer), a tensor learning rate, the hooks gone after the block, and
the words of each change. tests/test_clinic_judgement.py judges it through the clinic."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

from lesson.course.learner.run_setup import (Change, OptimizerSetup, RunSetup,
                                             cause_settings, record_setup, setup_changes)


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(torch.ones(4, 3)).pow(2).mean().backward()
    opt.step()


def test_a_course_tools_optimizer_is_not_the_runs_set_up():
    tool = {"__name__": "lesson.checks.a_sweep", "torch": torch, "nn": nn, "_step": _step}
    exec("def sweep():\n"
         "    probe = nn.Linear(3, 1)\n"
         "    opt = torch.optim.Adam(probe.parameters(), lr=1e-3)\n"
         "    for _ in range(5):\n"
         "        _step(probe, opt)\n", tool)
    model = nn.Linear(3, 1)
    with record_setup() as setup:
        tool["sweep"]()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            _step(model, opt)
    (only,) = setup.optimizers
    assert (only.kind, only.lrs, only.steps, only.parameters) == ("SGD", (0.1,), 3, 4)


def test_a_tensor_learning_rate_is_read_as_a_number():
    model = nn.Linear(3, 1)
    with record_setup() as setup:
        _step(model, torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01)))
    assert setup.optimizers[0].lrs == pytest.approx((0.01,))   # a float, not a tensor


def test_no_hook_is_left_on_the_parameters_after_the_block():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with record_setup():
        _step(model, opt)
        assert all(p._post_accumulate_grad_hooks for p in model.parameters())
    assert not any(p._post_accumulate_grad_hooks for p in model.parameters())


def test_a_gradient_that_is_zero_after_backward_is_not_read_as_clipped():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with record_setup() as setup:
        for _ in range(3):
            opt.zero_grad()
            (model(torch.ones(4, 3)) * 0).sum().backward()
            opt.step()
    assert setup.shrunk_steps == 0 and not setup.clipped


def _sgd(lr: float = 0.1, wd: float = 0.0, steps: int = 100) -> OptimizerSetup:
    return OptimizerSetup("SGD", (lr,), (wd,), (("momentum", 0),), 10, steps)


def _run(opt: OptimizerSetup, seed: int = 5, shrunk: int = 0) -> RunSetup:
    return RunSetup([opt], shrunk, seed, {})


def test_a_learning_rate_and_a_weight_decay_changed_together_are_both_named():
    changes = setup_changes(_run(_sgd()), _run(_sgd()), _run(_sgd(lr=0.01, wd=1e-4)))
    assert [c.kind for c in changes] == ["lr_lowered", "weight_decay"]
    assert changes[1].says == "weight decay added to SGD (0.0001)"


def test_a_weight_decay_removed_says_so():
    changes = setup_changes(_run(_sgd(wd=1e-4)), _run(_sgd(wd=1e-4)), _run(_sgd(wd=0.0)))
    assert [(c.kind, c.says, c.broken) for c in changes] == [
        ("weight_decay", "the weight decay of SGD removed", "weight decay 0.0001")]


def test_the_same_seed_in_all_three_runs_is_no_change_without_seeds_given():
    assert setup_changes(_run(_sgd(), seed=5), _run(_sgd(), seed=5), _run(_sgd(), seed=5)) == []
    (change,) = setup_changes(_run(_sgd(), seed=5), _run(_sgd(), seed=5), _run(_sgd(), seed=6))
    assert change.kind == "seed"


def test_clipping_added_quotes_the_unclipped_training():
    (change,) = setup_changes(_run(_sgd()), _run(_sgd()), _run(_sgd(), shrunk=3))
    assert (change.kind, change.broken) == ("clipping", "no clipping")
    (change,) = setup_changes(_run(_sgd(), shrunk=3), _run(_sgd(), shrunk=3), _run(_sgd()))
    assert (change.kind, change.broken) == ("clipping", "clipping")


def test_a_fix_that_adds_clipping_is_still_missing_from_a_repair_without_it():
    broken, fixed = _run(_sgd()), _run(_sgd(), shrunk=5)
    assert cause_settings(broken, fixed, _run(_sgd())) == [
        "no scaling of the gradients between backward() and step()"]
    assert cause_settings(broken, fixed, _run(_sgd(), shrunk=2)) == []
    assert cause_settings(fixed, broken, _run(_sgd(), shrunk=2)) == [
        "the gradients scaled down between backward() and step()"]


def test_a_set_up_crosses_as_plain_data_and_comes_back_the_same():
    model = nn.Linear(3, 1)
    with record_setup() as setup:
        _step(model, torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99)))
        nn.ReLU()(torch.ones(2))
    plain = json.loads(json.dumps(setup.to_plain()))         # lists where there were tuples
    assert RunSetup.from_plain(plain) == setup


def test_the_settings_are_the_first_groups_and_each_group_has_its_rate():
    a, b = nn.Linear(3, 1), nn.Linear(3, 1)
    with record_setup() as setup:
        opt = torch.optim.SGD([{"params": a.parameters(), "momentum": 0.9},
                               {"params": b.parameters(), "momentum": 0.5, "lr": 0.2}], lr=0.1)
        opt.zero_grad()
        (a(torch.ones(4, 3)) + b(torch.ones(4, 3))).sum().backward()
        opt.step()
    (sgd,) = setup.optimizers
    assert dict(sgd.settings)["momentum"] == 0.9 and sgd.lrs == (0.1, 0.2)


class _Plain(torch.optim.Optimizer):
    """A hand-written optimizer, as exercise 5's mini-framework has: no weight decay at all."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"])


def test_an_optimizer_without_weight_decay_has_none():
    model = nn.Linear(3, 1)
    with record_setup() as setup:
        _step(model, _Plain(model.parameters(), lr=0.05))
    (plain,) = setup.optimizers
    assert (plain.kind, plain.lrs, plain.weight_decays) == ("_Plain", (0.05,), (0.0,))


def test_a_change_is_a_value():
    change = setup_changes(_run(_sgd()), _run(_sgd()), _run(_sgd(lr=0.01)))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.says = "something else"
    assert len({change, Change(change.kind, change.says, change.broken)}) == 1


def test_several_groups_with_lowered_rates_are_one_change():
    f = OptimizerSetup("SGD", (0.1, 0.2), (0.0, 0.0), (), 10, 100)
    r = OptimizerSetup("SGD", (0.01, 0.02), (0.0, 0.0), (), 10, 100)
    changes = setup_changes(_run(f), _run(f), _run(r))
    assert [(c.kind, c.says) for c in changes] == [
        ("lr_lowered", "the learning rate of SGD lowered from 0.1 to 0.01")]


def test_a_weight_decay_the_fix_itself_changes_is_not_the_repairs_change():
    broken, fixed = _run(_sgd(wd=0.0)), _run(_sgd(wd=1e-4))
    assert setup_changes(broken, fixed, _run(_sgd(wd=5e-4))) == []


def test_several_groups_with_changed_weight_decay_are_one_change():
    f = OptimizerSetup("SGD", (0.1, 0.1), (1e-4, 1e-4), (), 10, 100)
    r = OptimizerSetup("SGD", (0.1, 0.1), (1e-3, 1e-3), (), 10, 100)
    assert [c.kind for c in setup_changes(_run(f), _run(f), _run(r))] == ["weight_decay"]


def test_a_cause_is_still_there_only_when_the_repair_left_every_setting_the_fix_changes():
    broken, fixed = _run(_sgd(lr=0.1)), _run(_sgd(lr=0.01), shrunk=4)
    assert cause_settings(broken, fixed, _run(_sgd(lr=0.01))) == []     # the rate: changed
    assert cause_settings(broken, fixed, _run(_sgd(lr=0.1))) == [
        "the learning rate of SGD, 0.1",
        "no scaling of the gradients between backward() and step()"]


def _warmed(peak: float, warmup: int, steps: int = 12) -> RunSetup:
    """The set-up of a run whose rate ramps linearly from 1% of `peak` over `warmup` steps
    (none: 0), then stays there."""
    model = nn.Linear(3, 1)
    with record_setup() as setup:
        opt = torch.optim.SGD(model.parameters(), lr=peak)
        ramp = torch.optim.lr_scheduler.LinearLR(opt, 0.01, total_iters=warmup) if warmup \
            else None
        for _ in range(steps):
            _step(model, opt)
            if ramp is not None:
                ramp.step()
    return setup


def test_the_peak_rate_is_recorded_and_crosses_as_plain_data():
    setup = _warmed(0.3, 5)
    (only,) = setup.optimizers
    assert only.lrs == pytest.approx((0.003,)) and only.peak_lrs == pytest.approx((0.3,))
    assert RunSetup.from_plain(json.loads(json.dumps(setup.to_plain()))) == setup


def test_a_warm_up_to_the_same_peak_is_the_fix_and_a_lower_peak_hides():
    broken, fixed = _warmed(0.3, 0), _warmed(0.3, 5)
    assert setup_changes(broken, fixed, _warmed(0.3, 8)) == []       # another warm-up
    (lower,) = setup_changes(broken, fixed, _warmed(0.03, 0))         # no warm-up, lower
    assert lower.kind == "lr_lowered"
    assert lower.says == "the peak learning rate of SGD lowered from 0.3 to 0.03"
    (higher,) = setup_changes(broken, fixed, _warmed(0.6, 5))
    assert higher.kind == "lr_raised"
    # the cause, a rate at its peak from the first step, is still there only without a ramp
    assert cause_settings(broken, fixed, _warmed(0.3, 0)) == ["the learning rate of SGD, 0.3"]
    assert cause_settings(broken, fixed, _warmed(0.3, 8)) == []


def test_a_rate_changed_from_the_first_step_is_one_change_not_two():
    broken = fixed = _warmed(0.3, 0)
    (lower,) = setup_changes(broken, fixed, _warmed(0.1, 0))
    assert lower.says == "the learning rate of SGD lowered from 0.3 to 0.1"
    # a fix that lowers the rate: left as broken, one setting is still there, not two
    assert cause_settings(_warmed(0.3, 0), _warmed(0.1, 0), _warmed(0.3, 0)) == [
        "the learning rate of SGD, 0.3"]
