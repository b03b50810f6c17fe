"""A case's symptom and target checks: one declared form gives both the verdict and its margin."""
from __future__ import annotations

import dataclasses
import math

import pytest

from broken_models import CATALOGUE, Outcome
from broken_models.case import YesNo
from broken_models.checks import (AllOf, AnyOf, Check, above, at_least, at_most, below, change,
                                  difference, finite, metric, not_finite, ratio, safe_margin,
                                  spread, tail_mean, tail_median)


def test_a_bound_holds_by_its_margin_in_the_quantitys_units():
    check = at_least("val_accuracy", 0.9)
    assert check({"val_accuracy": 0.93}) and check.margin({"val_accuracy": 0.93}) == pytest.approx(0.03)
    assert not check({"val_accuracy": 0.8}) and check.margin({"val_accuracy": 0.8}) == pytest.approx(-0.1)
    assert check({"val_accuracy": 0.9}) and check.margin({"val_accuracy": 0.9}) == 0
    strict = above("val_accuracy", 0.9)
    assert not strict({"val_accuracy": 0.9})
    low = below("final_loss", 0.5)
    assert low.margin({"final_loss": 0.2}) == pytest.approx(0.3)
    assert at_most("x", 1).describe() == "x <= 1" and low.describe() == "final_loss < 0.5"


def test_a_quantity_that_spans_decades_has_its_margin_in_decades():
    check = at_least(metric("first_loss", log=True), 1000)
    assert check.margin({"first_loss": 1e5}) == pytest.approx(2.0)
    assert check.margin({"first_loss": 10.0}) == pytest.approx(-2.0)
    assert ratio("final_loss", "first_loss").log
    flat = below(change("final_loss", "first_loss"), 1e-6)
    assert flat.margin({"final_loss": 2.0, "first_loss": 2.0}) == math.inf   # did not move at all
    assert flat.margin({"final_loss": 2.0, "first_loss": 2.001}) == pytest.approx(-3.0)
    assert below(spread("losses"), 1e-7).holds({"losses": [0.7, 0.7, 0.7]})
    with pytest.raises(ValueError, match="positive"):
        at_least(metric("x", log=True), 0)


def test_nan_meets_a_bound_only_when_the_bound_says_so():
    blew_up = at_least(ratio("final_loss", "first_loss"), 0.5, nonfinite=True)
    learned = at_least("val_accuracy", 0.9)
    nan = {"final_loss": math.nan, "first_loss": 2.3, "val_accuracy": math.nan}
    assert blew_up(nan) and blew_up.margin(nan) == math.inf
    assert not learned(nan) and learned.margin(nan) == -math.inf
    assert not_finite("final_loss")(nan) and not finite("final_loss")(nan)
    assert finite("final_loss").margin({"final_loss": 1.0}) == math.inf


def test_and_takes_the_smallest_margin_or_the_largest():
    m = {"val_accuracy": 0.95, "final_loss": 0.45}
    both = at_least("val_accuracy", 0.9) & below("final_loss", 0.5)
    either = at_least("val_accuracy", 0.99) | below("final_loss", 0.5)
    assert isinstance(both, AllOf) and isinstance(either, AnyOf)
    assert both(m) and both.margin(m) == pytest.approx(0.05)
    assert either(m) and either.margin(m) == pytest.approx(0.05)
    assert not (at_least("val_accuracy", 0.99) & below("final_loss", 0.5))(m)
    three = both & above("x", 0)
    assert len(three.parts) == 3, "chained & stays flat"
    assert "val_accuracy 0.95 (needs >= 0.9)" in both.values(m)
    with pytest.raises(TypeError, match="combine"):
        both & (lambda m: True)


def test_series_quantities_read_the_end_of_the_curve():
    m = {"losses": [5.0] * 10 + [1.0, 2.0, 3.0], "a": 0.9, "b": 0.7}
    assert tail_mean("losses", 3)(m) == 2.0 and tail_median("losses", 3)(m) == 2.0
    assert difference("a", "b")(m) == pytest.approx(0.2)


def test_a_missing_metric_has_no_margin_to_give():
    assert safe_margin(at_least("val_accuracy", 0.9), {}) == -math.inf
    with pytest.raises(TypeError, match="metric name"):
        at_least(3, 0.9)
    with pytest.raises(ValueError, match="op"):
        dataclasses.replace(at_least("x", 1), op="==")


def test_every_page_declares_measurable_checks():
    for name, case in CATALOGUE.items():
        for check in (case.symptom_check, case.target_check):
            assert isinstance(check, Check) and not isinstance(check, YesNo), (
                f"{name}: declare SYMPTOM_CHECK and TARGET_CHECK from broken_models.checks")


def test_a_run_carries_the_margins_of_its_checks():
    case = CATALOGUE["double_softmax"]
    run = case.evaluate(lambda seed: Outcome({"val_accuracy": 0.95, "final_loss": 0.3},
                                             findings=[]), seed=0)
    assert run.target_reached and run.target_margin == pytest.approx(0.05)
    assert not run.symptom_seen and run.symptom_margin == pytest.approx(0.3 - 1.46)


def test_a_page_with_yes_no_functions_still_loads_without_margins():
    import types

    from broken_models.case import Case

    page = types.ModuleType("broken_models.pytorch.old_style")
    source = CATALOGUE["double_softmax"]
    for field in ("TITLE", "SYMPTOM", "EXPECTED", "CAUSES", "CONSEQUENCES", "TOOL", "LESSON", "FIX",
                  "TARGET"):
        setattr(page, field, getattr(source, field.lower()))
    page.train_broken, page.train_fixed = source.train_broken, source.train_fixed
    page.symptom_seen = lambda m: m["final_loss"] > 1.46
    page.target_reached = lambda m: m["val_accuracy"] >= 0.9
    case = Case.from_module(page)
    run = case.evaluate(lambda seed: Outcome({"val_accuracy": 0.95, "final_loss": 0.3},
                                             findings=[]), seed=0)
    assert run.target_reached and math.isnan(run.target_margin)
    del page.symptom_seen
    with pytest.raises(AttributeError, match="declare SYMPTOM_CHECK"):
        Case.from_module(page)
    with pytest.raises(TypeError, match="must be a broken_models.checks.Check"):
        dataclasses.replace(CATALOGUE["double_softmax"], target_check=lambda m: True)
