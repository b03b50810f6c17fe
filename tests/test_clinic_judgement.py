"""The clinic's judgement, piece by piece (lesson.course.learner.clinic): how a diagnosis is
graded (codes in any letter case), which lines are the harness, and what a repair's set-up
changed against the broken script's and the catalogue's fix (run_setup)."""
from __future__ import annotations

import pytest

from lesson.course.learner import harness
from lesson.course.learner.clinic import (DiagnosisVerdict, harness_changes, harness_lines,
                                          judge_diagnosis)
from lesson.course.learner.run_setup import (OptimizerSetup, RunSetup, cause_settings,
                                             record_setup, setup_changes)


@pytest.mark.parametrize("label", ["dead_relu", "case1_3"])
def test_the_cause_is_right_and_names_the_case(label):
    verdict = judge_diagnosis(label, "DEAD_NEURONS")
    assert verdict == DiagnosisVerdict("cause", verdict.message) and verdict.right
    assert "Solved" in verdict.message and "dead_relu" in verdict.message
    assert judge_diagnosis(label, "COLLAPSED_ACTIVATIONS").kind == "consequence"


@pytest.mark.parametrize("code, kind", [
    ("NAN_OR_INF", "consequence"), ("OVERFITTING", "unrelated"), (None, "missing"),
    ("nan_or_inf", "consequence"), ("NAN", "not a code"), (3, "not a code"),
    (["NAN"], "not a code"),
])
def test_every_other_answer_is_wrong_and_says_why_without_the_cause(code, kind):
    verdict = judge_diagnosis("log_of_zero", code)
    assert verdict.kind == kind and not verdict.right
    assert "LOG_OF_ZERO" not in verdict.message and "log_of_zero" not in verdict.message
    if kind == "missing":
        assert 'diagnosis["case' in verdict.message


def test_harness_lines_are_the_measuring_and_reporting_lines():
    source = ("def f():\n    model = Net()\n    debugger = NetworkDebugger(model)\n"
              "    loss = crit(model(x), y)\n    debugger.record_loss(loss.item())\n"
              "    findings = validate_data(x, y)\n    return Outcome(metrics, findings)\n"
              "    opt.step()\n    report = gradient_check(model, x, y, crit)\n")
    assert harness_lines(source) == [
        "debugger = NetworkDebugger(model)", "debugger.record_loss(loss.item())",
        "findings = validate_data(x, y)", "return Outcome(metrics, findings)",
        "report = gradient_check(model, x, y, crit)"]


@pytest.mark.parametrize("line", ["debugger.record_loss(loss.detach())",
                                  "debugger.record_loss(loss)", "  debugger.record_loss(loss.item())  "])
def test_the_ways_of_recording_a_loss_are_the_same_line(line):
    assert harness._normalised(line) == harness._normalised("debugger.record_loss(loss.item())")
    assert harness._normalised("debugger.record_val_loss(v.item())") == \
        "debugger.record_val_loss(v)"
    assert harness._normalised("debugger.record_loss(other)") != \
        harness._normalised("debugger.record_loss(loss)")


def test_a_repair_whose_source_cannot_be_read_is_reported():
    assert harness_changes("dead_relu", len)[0].startswith("cannot read the repair's source")


def test_the_catalogues_own_scripts_are_not_repairs():
    from broken_models import CATALOGUE

    case = CATALOGUE["dead_relu"]
    assert harness_changes("dead_relu", case.train_broken) == [
        "this is the catalogue's own script, not a repair"]
    assert harness_changes("dead_relu", case.train_fixed) == [
        "this is the catalogue's own script, not a repair"]


# -- the set-up a repair trains with, against the broken script's and the fix's ----------------
def _opt(kind="Adam", lr=0.05, wd=0.0, steps=100, parameters=1000, **settings):
    return OptimizerSetup(kind, (lr,), (wd,), tuple(sorted(settings.items())), parameters, steps)


def _setup(*optimizers, shrunk=0, seed=0, **layers):
    return RunSetup(list(optimizers), shrunk, seed, {k: tuple(v) for k, v in layers.items()})


def _kinds(changes):
    return [c.kind for c in changes]


def test_the_same_set_up_written_any_way_is_no_change():
    same = _setup(_opt())
    assert setup_changes(same, same, _setup(_opt())) == []


@pytest.mark.parametrize("repair, kind, says", [
    (_opt(lr=0.005), "lr_lowered", "the learning rate of Adam lowered from 0.05 to 0.005"),
    (_opt(lr=0.5), "lr_raised", "the learning rate of Adam raised from 0.05 to 0.5"),
    (_opt(wd=1e-3), "weight_decay", "weight decay added to Adam (0.001)"),
    (_opt(kind="SGD"), "optimizer_swapped", "the optimizer swapped from Adam to SGD"),
    (_opt(kind="AdamW"), "weight_decay", "swapped from Adam to AdamW (decoupled weight decay)"),
    (_opt(steps=30), "fewer_steps", "fewer steps: Adam steps 30 times, where the training runs "
                                    "100 steps"),
    (_opt(steps=300), "more_steps", "more steps"),
    (_opt(parameters=500), "smaller_model", "a smaller model: Adam trains 500 parameters, "
                                            "not 1,000"),
    (_opt(amsgrad=True), "optimizer_setting", "Adam's amsgrad None -> True"),
])
def test_each_change_of_the_set_up_says_which_way_it_went(repair, kind, says):
    """The student tester's set-up message always said "a lower learning rate or fewer steps",
    even for a raised rate or weight decay added."""
    base = _setup(_opt())
    changes = setup_changes(base, base, _setup(repair))
    assert _kinds(changes) == [kind] and says in changes[0].says, changes


def test_clipping_another_seed_and_other_layers_are_changes_of_the_set_up():
    base = _setup(_opt(), seed=7, activation=["ReLU"])
    assert _kinds(setup_changes(base, base, _setup(_opt(), shrunk=3, seed=7,
                                                   activation=["ReLU"]))) == ["clipping"]
    moved = setup_changes(base, base, _setup(_opt(), seed=8, activation=["ReLU"]), seeds=(0, 0, 0))
    assert _kinds(moved) == ["seed"] and "seeded with 8, not with 7" in moved[0].says
    # the seed follows the seed the run is given: seed 3 seeds torch with 3 + 7
    assert setup_changes(base, base, _setup(_opt(), seed=10, activation=["ReLU"]),
                         seeds=(0, 0, 3)) == []
    swapped = setup_changes(base, base, _setup(_opt(), seed=7, activation=["GELU"]))
    assert _kinds(swapped) == ["activation"] and "GELU added; ReLU removed" in swapped[0].says


def test_what_the_fix_changes_is_free_and_is_the_cause_when_left_in_place():
    """The fix lowers the rate: a repair may set any rate (the cause is there), but one that
    keeps the broken rate and clips instead leaves the cause in place, said in words."""
    broken, fixed = _setup(_opt(lr=10.0)), _setup(_opt(lr=0.01))
    assert setup_changes(broken, fixed, _setup(_opt(lr=0.02))) == []
    assert cause_settings(broken, fixed, _setup(_opt(lr=0.02))) == []
    clipped = _setup(_opt(lr=10.0), shrunk=50)
    assert _kinds(setup_changes(broken, fixed, clipped)) == ["clipping"]
    assert cause_settings(broken, fixed, clipped) == ["the learning rate of Adam, 10"]


def test_a_fix_that_changes_layers_leaves_the_cause_while_they_are_the_broken_ones():
    broken = _setup(_opt(), activation=["Sigmoid"])
    fixed = _setup(_opt(), activation=["ReLU"])
    assert cause_settings(broken, fixed, _setup(_opt(), activation=["Sigmoid"])) == [
        "the activation layers Sigmoid"]
    assert cause_settings(broken, fixed, _setup(_opt(), activation=["GELU"])) == []


def test_the_set_up_is_recorded_while_it_trains():
    """Whatever the source says: the optimizer as it steps, the gradients shrunk between
    backward() and step(), torch's seed, the layers that ran; a tool's own optimizer is not
    the run's."""
    import torch
    from torch import nn

    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    with record_setup() as setup:
        opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
        for group in opt.param_groups:
            group["lr"] = 0.1                          # set after it was built
        for step in range(3):
            opt.zero_grad()
            model(torch.randn(8, 3)).pow(2).mean().backward()
            if step == 1:
                nn.utils.clip_grad_norm_(model.parameters(), 1e-6)
            opt.step()
    [sgd] = setup.optimizers
    assert (sgd.kind, sgd.lrs, sgd.steps, sgd.parameters) == ("SGD", (0.1,), 3, 21)
    assert dict(sgd.settings)["momentum"] == 0.9
    assert setup.shrunk_steps == 1 and setup.clipped and setup.seed == 5
    assert setup.layers["activation"] == ("Tanh",) and setup.layers["dropout"] == ()
    assert RunSetup.from_plain(setup.to_plain()) == setup


def test_overfitting_declares_stopping_early_and_regularising_real_fixes():
    from broken_models import CATALOGUE

    assert {"fewer_steps", "weight_decay"} <= set(CATALOGUE["overfitting"].real_fixes)
    assert CATALOGUE["dead_relu"].real_fixes == ()


def test_a_verdict_cannot_be_rewritten_into_a_right_one():
    import dataclasses

    verdict = judge_diagnosis("log_of_zero", "NAN_OR_INF")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.kind = "cause"
    assert not verdict.right
