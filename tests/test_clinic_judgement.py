"""The clinic's judgement, piece by piece (lesson.course.learner.clinic): how a diagnosis is
graded, which lines are the harness, and which set-up a repair must keep."""
from __future__ import annotations

import pytest

from lesson.course.learner import clinic
from lesson.course.learner.clinic import (DiagnosisVerdict, harness_changes, harness_lines,
                                          judge_diagnosis, setup_changes, setup_kept,
                                          training_setup)


@pytest.mark.parametrize("label", ["dead_relu", "case1_3"])
def test_the_cause_is_right_and_names_the_case(label):
    verdict = judge_diagnosis(label, "DEAD_NEURONS")
    assert verdict == DiagnosisVerdict("cause", verdict.message) and verdict.right
    assert "Solved" in verdict.message and "dead_relu" in verdict.message
    assert judge_diagnosis(label, "SYMMETRIC_WEIGHTS").right     # any listed cause


@pytest.mark.parametrize("code, kind", [
    ("NAN_OR_INF", "consequence"), ("OVERFITTING", "unrelated"), (None, "missing"),
    ("nan_or_inf", "not a code"), (3, "not a code"), (["NAN"], "not a code"),
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
    assert clinic._normalised(line) == clinic._normalised("debugger.record_loss(loss.item())")
    assert clinic._normalised("debugger.record_val_loss(v.item())") == \
        "debugger.record_val_loss(v)"
    assert clinic._normalised("debugger.record_loss(other)") != \
        clinic._normalised("debugger.record_loss(loss)")


def test_a_repair_whose_source_cannot_be_read_is_reported():
    assert harness_changes("dead_relu", len)[0].startswith("cannot read the repair's source")
    assert setup_changes("dead_relu", len)[0].startswith("cannot read the repair's source")


def test_the_catalogues_own_scripts_are_not_repairs_but_keep_their_set_up():
    from broken_models import CATALOGUE

    case = CATALOGUE["dead_relu"]
    assert harness_changes("dead_relu", case.train_broken) == [
        "this is the catalogue's own script, not a repair"]
    assert harness_changes("dead_relu", case.train_fixed) == [
        "this is the catalogue's own script, not a repair"]
    assert setup_changes("dead_relu", case.train_broken) == []


def _literal(source: str) -> str:
    import ast
    return clinic._literal(ast.parse(source, mode="eval").body)


def test_numbers_are_compared_by_value_and_the_rest_as_written():
    assert _literal("5e-2") == _literal("0.05") == "0.05"
    assert _literal("100") == "100" and _literal("1e2") == "100.0"
    assert _literal("2 ** -3") == "2 ** (-3)" and _literal("lr") == "lr"


def test_training_setup_reads_each_optimizer_rate_and_loop_range():
    source = ("def f(model, params, lr):\n"
              "    a = torch.optim.Adam(model.parameters(), lr=3e-3)\n"
              "    b = SGD(params, 0.1, momentum=0.9)\n"
              "    c = AdamW(params)\n"
              "    d = MyOptimizer(params, 0.5)\n"
              "    e = RMSprop(params, lr=lr)\n"
              "    for epoch in range(0, 10, 2):\n"
              "        for batch in loader:\n"
              "            pass\n"
              "    for i in range(n):\n"
              "        pass\n"
              "    for j in list(range(4)):\n"
              "        pass\n")
    assert training_setup(source) == {"Adam(lr=0.003)", "SGD(lr=0.1)", "RMSprop(lr=lr)",
                                      "range(0, 10, 2)", "range(n)"}
    assert training_setup("    def indented():\n        return SGD(p, lr=1)\n") == {"SGD(lr=1)"}


def test_stopping_early_is_free_only_where_the_cause_is_overfitting():
    assert setup_kept("overfitting") == {"Adam(lr=0.003)"}
    assert setup_kept("dead_relu") == {"range(100)", "Adam(lr=0.01)"}
    assert setup_kept("log_of_zero") == {"Adam(lr=0.05)", "range(100)"}


def test_a_repair_that_changes_the_rate_and_the_steps_is_told_to_keep_both():
    def repair():
        opt = Adam(params, lr=0.001)        # noqa: F821 (read, never run)
        for step in range(10):
            pass
    assert setup_changes("log_of_zero", repair) == ["keep Adam(lr=0.05)", "keep range(100)"]

    def honest():
        opt = Adam(params, lr=5e-2)         # noqa: F821
        for step in range(100):
            pass
    assert setup_changes("log_of_zero", honest) == []


def test_a_verdict_cannot_be_rewritten_into_a_right_one():
    import dataclasses

    verdict = judge_diagnosis("log_of_zero", "NAN_OR_INF")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.kind = "cause"
    assert not verdict.right
