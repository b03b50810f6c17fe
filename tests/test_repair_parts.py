"""`lesson.course.learner.repair` on a hand-made case: the catalogue's fix read as a script diff,
the set-up a repair trained with, a run that stops at its NaN, and each part of the verdict.
Nothing trains here (the case's run is given); tests/test_clinic_judgement.py and
tests/test_remedies.py judge real repairs of real cases."""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch
from torch import nn

from lesson.course.learner import harness, repair
from lesson.course.learner.repair import (RepairVerdict, fix_sites, judge_repair,
                                          trained_setup)
from lesson.course.learner.run_setup import OptimizerSetup, RunSetup

BROKEN = """
def train_broken(seed):
    x = seed + 1
    y = x * 10

    z = y - 3
    return finish(z)
"""


def _script(tmp_path: Path, source: str) -> Callable[..., Any]:
    """The function `source` defines, imported from a file of its own (its source is read)."""
    name = f"script{len(list(tmp_path.glob('*.py')))}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"_repair_parts_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (fn,) = [v for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
    return fn


def _sgd(lr: float = 0.1, wd: float = 0.0, steps: int = 100) -> OptimizerSetup:
    return OptimizerSetup("SGD", (lr,), (wd,), (("momentum", 0),), 10, steps)


def _setup(opt: OptimizerSetup | None = None, seed: int = 3, shrunk: int = 0) -> RunSetup:
    return RunSetup([opt or _sgd()], shrunk, seed, {})


@dataclass
class FakeCase:
    """What the judgement reads of a case: its scripts' sources, its run and its target."""

    broken: str = BROKEN
    fixed: str = BROKEN.replace("train_broken", "train_fixed").replace("x * 10", "x * 2")
    run: Any = None
    real_fixes: tuple[str, ...] = ()
    name: str = "fake_case"
    evaluated: list[int] = field(default_factory=list)

    def source(self, which: str) -> str:
        return {"broken": self.broken, "fixed": self.fixed}[which]

    def evaluate(self, fn: Callable[[int], Any], seed: int = 0) -> Any:
        fn(seed)
        self.evaluated.append(seed)
        return self.run

    def target_report(self, metrics: dict[str, Any]) -> str:
        return f"{'reached' if metrics['acc'] >= 0.9 else 'missed'}: acc {metrics['acc']} " \
               "(needs >= 0.9)"


def _run(codes: tuple[str, ...] = (), acc: float = 0.95, losses: tuple[float, ...] = (1.0,)):
    return SimpleNamespace(codes=list(codes), metrics={"acc": acc}, target_reached=acc >= 0.9,
                           healthy=not codes and acc >= 0.9,
                           debugger=SimpleNamespace(loss_history=list(losses)))


def _trains_with(setup: RunSetup) -> Callable[[int], Any]:
    """A repair that trains nothing here and sends back `setup`, as the grader's sandbox does."""
    def fixed_elsewhere(seed: int) -> Any:
        return SimpleNamespace(_nndebug_setup=setup)
    return fixed_elsewhere


@pytest.fixture
def judged(monkeypatch):
    """Judge a repair of `case`, the reference set-ups given, the measuring lines kept."""
    asked: list[int] = []

    def judge(case: FakeCase, fn: Callable[[int], Any], broken: RunSetup, fixed: RunSetup,
              seed: int = 3, **kw: Any) -> RepairVerdict:
        monkeypatch.setattr(harness, "harness_changes", lambda label, r: [])
        monkeypatch.setattr(repair, "reference_setups",
                            lambda name, s: (asked.append(s), (broken, fixed))[1])
        return judge_repair(case, fn, seed, **kw)
    judge.asked = asked
    return judge


# -- the catalogue's fix, read as a script diff -------------------------------------------------
def test_a_line_in_context_has_nothing_before_the_first_and_after_the_last():
    lines = ["a", "b", "c"]
    assert [repair._in_context(lines, i) for i in range(3)] == [
        ("", "a", "b"), ("a", "b", "c"), ("b", "c", "")]


def test_a_changed_line_is_read_with_its_neighbours_and_the_functions_name_is_not_a_change():
    changed, inserted = fix_sites(FakeCase())
    assert changed == [("x = seed + 1", "y = x * 10", "z = y - 3")]   # the blank line skipped
    assert inserted == []


def test_a_removed_line_is_a_change():
    case = FakeCase(fixed=BROKEN.replace("train_broken", "train_fixed")
                    .replace("    y = x * 10\n", ""))
    assert fix_sites(case) == ([("x = seed + 1", "y = x * 10", "z = y - 3")], [])


def test_lines_inserted_inside_the_script_are_places_and_at_its_ends_are_not():
    fixed = BROKEN.replace("train_broken", "train_fixed").replace(
        "    y = x * 10\n", "    y = x * 10\n    y = y.clamp(0)\n")
    assert fix_sites(FakeCase(fixed=fixed)) == ([], [("y = x * 10", "z = y - 3")])
    # sources that agree on their first and last lines (a decorator, a closing line): lines
    # added before the first or after the last have no pair of lines to sit between
    broken = "@torch.no_grad()\n" + BROKEN
    for fixed in ("import math\n" + broken, broken + "print(z)\n"):
        assert fix_sites(FakeCase(broken=broken, fixed=fixed)) == ([], [])


def test_indentation_and_spacing_are_not_changes():
    fixed = BROKEN.replace("train_broken", "train_fixed").replace("x * 10", "x  *  10")
    assert fix_sites(FakeCase(fixed=textwrap.indent(fixed, "    "))) == ([], [])


def test_a_long_script_of_repeated_lines_reads_the_one_line_the_fix_changes():
    # difflib's autojunk heuristic would take the repeated line for junk in a script this long
    # and mark everything before the change as changed
    def script(name: str, scale: int) -> str:
        stack = "    layers.append(block())\n" * 120
        return f"def {name}(seed):\n{stack}    y = x * {scale}\n{stack}    return y\n"
    case = FakeCase(broken=script("train_broken", 10), fixed=script("train_fixed", 2))
    assert fix_sites(case) == ([("layers.append(block())", "y = x * 10",
                                 "layers.append(block())")], [])


def test_a_reference_shared_from_the_cache_cannot_be_changed():
    ref = repair.Reference(None, _setup(), _setup())
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.broken_setup = _setup(_sgd(lr=9.0))


def test_a_function_without_readable_source_has_none():
    assert repair._source(len) is None
    namespace: dict[str, Any] = {}
    exec("def typed_in(seed):\n    return seed\n", namespace)
    assert repair._source(namespace["typed_in"]) is None
    assert "def _sgd(" in repair._source(_sgd)


# -- the set-up a repair trained with -----------------------------------------------------------
def _trains_here(seed: int) -> Any:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        opt.step()
    return SimpleNamespace(_nndebug_setup=_setup(_sgd(lr=9.0)))


def test_the_set_up_recorded_here_counts_over_the_one_sent_back():
    outcome, setup = trained_setup(_trains_here, 0)
    assert outcome._nndebug_setup.optimizers[0].lrs == (9.0,)
    assert [(o.lrs, o.steps) for o in setup.optimizers] == [((0.05,), 2)]


def test_a_run_that_trains_elsewhere_counts_the_set_up_it_sends_back():
    sent = _setup(_sgd(lr=0.7))
    assert trained_setup(_trains_with(sent), 0)[1] is sent


def test_a_run_that_sends_back_anything_else_counts_the_empty_record_here():
    outcome, setup = trained_setup(lambda seed: SimpleNamespace(_nndebug_setup={"lr": 1}), 0)
    assert not setup.optimizers and not any(setup.layers.values())
    assert outcome._nndebug_setup == {"lr": 1}


def test_layers_that_ran_here_count_though_no_optimizer_was_built():
    def forward_only(seed: int) -> Any:
        nn.Sequential(nn.Linear(2, 2), nn.ReLU())(torch.ones(1, 2))
        return SimpleNamespace(_nndebug_setup=_setup())
    setup = trained_setup(forward_only, 0)[1]
    assert not setup.optimizers and setup.layers.get("activation") == ("ReLU",)


# -- a run that stops at its NaN ----------------------------------------------------------------
@pytest.mark.parametrize("broken_steps, last, stopped", [
    (40, math.nan, True), (40, math.inf, True), (40, 0.5, False), (100, math.nan, False),
    (101, math.nan, False)])
def test_a_run_stops_at_its_nan_only_where_the_broken_script_stops_sooner(broken_steps, last,
                                                                          stopped):
    run = _run(losses=(1.0, last))
    assert repair._stopped_at_its_nan(run, _setup(_sgd(steps=broken_steps)),
                                      _setup(_sgd(steps=100))) is stopped


def test_a_run_without_losses_did_not_stop_at_a_nan():
    broken, fixed = _setup(_sgd(steps=40)), _setup(_sgd(steps=100))
    assert not repair._stopped_at_its_nan(_run(losses=()), broken, fixed)
    no_debugger = SimpleNamespace(debugger=None)
    assert not repair._stopped_at_its_nan(no_debugger, broken, fixed)


def test_steps_are_counted_over_every_optimizer():
    broken = RunSetup([_sgd(steps=60), _sgd(steps=60)], 0, 3, {})
    assert not repair._stopped_at_its_nan(_run(losses=(math.nan,)), broken,
                                          _setup(_sgd(steps=100)))


# -- the verdict --------------------------------------------------------------------------------
def test_a_healthy_run_with_the_set_up_kept_passes(judged):
    case = FakeCase(run=_run())
    verdict = judged(case, _trains_with(_setup()), _setup(), _setup())
    assert verdict.passed and bool(verdict) and verdict.run is case.run
    assert verdict.message.splitlines() == [
        "Seed 3: the repair passes: no finding, and the target is reached.",
        "  target: reached: acc 0.95 (needs >= 0.9)",
        "  findings: none"]
    assert (verdict.seed, verdict.hiding, verdict.real, verdict.cause_left, verdict.harness) \
        == (3, [], [], [], [])


def test_the_references_are_read_on_the_reference_seed(judged):
    case = FakeCase(run=_run())
    judged(case, _trains_with(_setup(seed=11)), _setup(), _setup(), seed=11, reference_seed=4)
    judged(case, _trains_with(_setup()), _setup(), _setup(), seed=3)
    assert judged.asked == [4, 3] and case.evaluated == [11, 3]


def test_a_repair_that_changes_the_measuring_lines_is_refused_before_it_runs(monkeypatch):
    case = FakeCase(run=_run())
    monkeypatch.setattr(harness, "harness_changes",
                        lambda label, r: ["acc = evaluate(model)", "return Outcome(...)"])
    verdict = judge_repair(case, _trains_with(_setup()), 2)
    assert not verdict and case.evaluated == [] and verdict.run is None
    assert verdict.harness == ["acc = evaluate(model)", "return Outcome(...)"]
    assert verdict.message.endswith("word for word (the bug is not in them): "
                                    "acc = evaluate(model); return Outcome(...)")


def test_findings_and_a_missed_target_are_each_named(judged):
    verdict = judged(FakeCase(run=_run(codes=("DEAD_NEURONS", "LR_TOO_LOW"), acc=0.7)),
                     _trains_with(_setup()), _setup(), _setup())
    head, target, findings = verdict.message.splitlines()
    assert not verdict
    assert head == ("Seed 3: the repair does not pass: the diagnostics still find DEAD_NEURONS, "
                    "LR_TOO_LOW; the target is missed.")
    assert target == "  target: missed: acc 0.7 (needs >= 0.9)"
    assert findings == "  findings: DEAD_NEURONS, LR_TOO_LOW"


def test_a_missed_target_alone_fails(judged):
    verdict = judged(FakeCase(run=_run(acc=0.5)), _trains_with(_setup()), _setup(), _setup())
    assert not verdict
    assert verdict.message.splitlines()[0] == \
        "Seed 3: the repair does not pass: the target is missed."


def test_a_setting_the_fix_keeps_changed_hides_the_symptom(judged):
    verdict = judged(FakeCase(run=_run()), _trains_with(_setup(_sgd(lr=0.01))),
                     _setup(), _setup())
    assert not verdict and [c.kind for c in verdict.hiding] == ["lr_lowered"]
    head, _, _, changed, left = verdict.message.splitlines()
    assert head == "Seed 3: the repair does not pass: it changes the set-up the bug is not in."
    assert changed.startswith("  changed where the bug is not: the learning rate of SGD "
                              "lowered from 0.1 to 0.01. ")
    assert left.startswith("  still there: the cause the catalogue's fix removes")


def test_a_hiding_change_in_an_unhealthy_run_does_not_claim_the_run_was_hidden(judged):
    verdict = judged(FakeCase(run=_run(codes=("LR_TOO_LOW",))),
                     _trains_with(_setup(_sgd(lr=0.01))), _setup(), _setup())
    assert not verdict and len(verdict.message.splitlines()) == 4
    assert "still there" not in verdict.message


def test_a_change_the_page_declares_a_real_fix_passes(judged):
    case = FakeCase(run=_run(), real_fixes=("weight_decay",))
    # the fix changes the learning rate; the repair keeps it and adds weight decay instead
    verdict = judged(case, _trains_with(_setup(_sgd(lr=10.0, wd=1e-3))),
                     _setup(_sgd(lr=10.0)), _setup(_sgd(lr=0.1)))
    assert verdict.passed
    assert [c.kind for c in verdict.real] == ["weight_decay"] and verdict.hiding == []
    assert verdict.cause_left == []


def test_the_cause_left_in_the_settings_with_a_symptom_hidden_elsewhere_is_named(judged):
    # the fix lowers the learning rate from 10; the repair keeps 10 and clips the gradients
    verdict = judged(FakeCase(run=_run()), _trains_with(_setup(_sgd(lr=10.0), shrunk=80)),
                     _setup(_sgd(lr=10.0)), _setup(_sgd(lr=0.1)))
    assert not verdict
    assert [c.kind for c in verdict.hiding] == ["clipping"]
    assert verdict.cause_left == ["the learning rate of SGD, 10"]
    lines = verdict.message.splitlines()
    assert lines[0] == ("Seed 3: the repair does not pass: it changes the set-up the bug is not "
                        "in; the cause is still in place.")
    assert lines[-1] == "  still there: the learning rate of SGD, 10."


def test_settings_left_as_broken_with_nothing_else_changed_are_judged_by_the_run(judged):
    # the settings say the cause is there, but a repair that changed nothing else is judged
    # by its run: the bug may be fixed in lines the set-up does not see
    verdict = judged(FakeCase(run=_run()), _trains_with(_setup(_sgd(lr=10.0))),
                     _setup(_sgd(lr=10.0)), _setup(_sgd(lr=0.1)))
    assert verdict.passed and verdict.cause_left == [] and verdict.hiding == []


def _repaired(tmp_path: Path, body: str, setup: RunSetup) -> Callable[[int], Any]:
    """A repair written out as a file (its lines are read), sending back `setup`."""
    fn = _script(tmp_path, "def repaired(seed):\n" + textwrap.indent(textwrap.dedent(body), "    ")
                 + "    return finish(z)\n")
    fn.__globals__["finish"] = lambda z: SimpleNamespace(_nndebug_setup=setup)
    return fn


KEPT = """
x = seed + 1
y = x * 10
z = y - 3
"""


def test_the_lines_the_fix_changes_left_in_place_with_a_symptom_hidden_are_named(judged,
                                                                               tmp_path):
    lowered = _setup(_sgd(lr=0.01))
    verdict = judged(FakeCase(run=_run()), _repaired(tmp_path, KEPT, lowered), _setup(), _setup())
    assert not verdict and [c.kind for c in verdict.hiding] == ["lr_lowered"]
    assert verdict.cause_left == ["the 1 line the catalogue's fix changes, as the broken "
                                  "script has it"]
    assert verdict.message.splitlines()[0].endswith("; the cause is still in place.")
    assert verdict.message.splitlines()[-1] == \
        "  still there: the 1 line the catalogue's fix changes, as the broken script has it."


def test_every_line_the_fix_changes_must_be_left_for_the_cause_to_be_there(judged, tmp_path):
    fixed = BROKEN.replace("train_broken", "train_fixed").replace("x * 10", "x * 2") \
        .replace("y - 3", "y - 1")
    lowered = _setup(_sgd(lr=0.01))
    both = judged(FakeCase(fixed=fixed, run=_run()), _repaired(tmp_path, KEPT, lowered),
                  _setup(), _setup())
    assert both.cause_left == ["the 2 lines the catalogue's fix changes, as the broken script "
                               "has them"]
    one = judged(FakeCase(fixed=fixed, run=_run()),
                 _repaired(tmp_path, KEPT.replace("y - 3", "y - 1"), lowered), _setup(), _setup())
    assert one.cause_left == [] and "still there: the cause the catalogue" in one.message


def test_a_changed_line_moved_elsewhere_is_not_in_place(judged, tmp_path):
    moved = "x = 1\ny = x * 10\nx = seed + 1\nz = y - 3\n"
    verdict = judged(FakeCase(run=_run()), _repaired(tmp_path, moved, _setup(_sgd(lr=0.01))),
                     _setup(), _setup())
    assert verdict.cause_left == []


def test_the_lines_left_in_place_with_nothing_else_changed_are_judged_by_the_run(judged,
                                                                                 tmp_path):
    verdict = judged(FakeCase(run=_run()), _repaired(tmp_path, KEPT, _setup()), _setup(), _setup())
    assert verdict.passed and verdict.cause_left == []


def test_a_repair_without_readable_source_is_judged_by_its_run_and_set_up(judged):
    typed_in: dict[str, Any] = {"finish": lambda: SimpleNamespace(
        _nndebug_setup=_setup(_sgd(lr=0.01)))}
    exec("def repaired(seed):\n    x = seed + 1\n    y = x * 10\n    z = y - 3\n"
         "    return finish()\n", typed_in)
    verdict = judged(FakeCase(run=_run()), typed_in["repaired"], _setup(), _setup())
    assert not verdict and verdict.cause_left == []
    assert "the cause the catalogue's fix removes" in verdict.message


INSERTS = BROKEN.replace("train_broken", "train_fixed").replace(
    "    y = x * 10\n", "    y = x * 10\n    y = y.clamp(0)\n")


@pytest.mark.parametrize("fixed, words", [
    (INSERTS, "nothing added where the catalogue's fix adds its line"),
    (INSERTS.replace("z = y - 3\n", "z = y - 3\n    z = z + 0\n"),
     "nothing added where the catalogue's fix adds its lines")])
def test_nothing_added_where_the_fix_adds_is_told_not_refused(judged, tmp_path, fixed, words):
    verdict = judged(FakeCase(fixed=fixed, run=_run()),
                     _repaired(tmp_path, KEPT, _setup(_sgd(lr=0.01))), _setup(), _setup())
    assert not verdict and verdict.message.splitlines()[-1] == f"  still there: {words}."
    assert verdict.cause_left == []          # a place is told, never proof
    assert "the cause is still in place" not in verdict.message


def test_something_added_where_the_fix_adds_leaves_nothing_to_tell(judged, tmp_path):
    added = KEPT.replace("y = x * 10\n", "y = x * 10\ny = abs(y)\n")
    verdict = judged(FakeCase(fixed=INSERTS, run=_run()),
                     _repaired(tmp_path, added, _setup(_sgd(lr=0.01))), _setup(), _setup())
    assert verdict.cause_left == [] and "still there: nothing added" not in verdict.message


def test_a_run_that_stops_at_its_nan_as_the_broken_one_does_has_not_cut_its_loop(judged):
    broken, fixed = _setup(_sgd(steps=40)), _setup(_sgd(steps=100))
    stopped = _setup(_sgd(steps=55))
    at_nan = judged(FakeCase(run=_run(codes=("NAN_LOSS",), losses=(1.0, math.nan))),
                    _trains_with(stopped), broken, fixed)
    assert at_nan.hiding == []
    cut = judged(FakeCase(run=_run(codes=("NAN_LOSS",), losses=(1.0, 0.9))),
                 _trains_with(stopped), broken, fixed)
    assert [c.kind for c in cut.hiding] == ["fewer_steps"]
