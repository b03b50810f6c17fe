"""The clinic's guard: a repair must fix the bug, not switch the measuring off."""
from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from lesson.course.learner.clinic import (evaluate_repair, harness_changes, harness_lines,
                                          setup_changes, show_case, training_setup)

CASES = ["missing_zero_grad", "dead_relu", "log_of_zero", "softmax_overflow",
         "test_rows_in_train", "labels_shuffled", "double_softmax", "nll_on_logits"]


def _script(name: str, which: str, edits: list[tuple[str, str]] = ()):
    """Compile a case's script (with edits) as if a student had typed it into a notebook."""
    import importlib
    import linecache

    from broken_models import CATALOGUE

    module = importlib.import_module(CATALOGUE[name].module)
    source = textwrap.dedent(inspect.getsource(getattr(module, which)))
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    filename = f"<student {name} {which} {len(edits)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(vars(module))
    exec(compile(source, filename, "exec"), namespace)
    return namespace[which]


@pytest.mark.parametrize("name", CASES)
def test_the_catalogues_fix_keeps_the_harness(name):
    fixed = _script(name, "train_fixed")
    assert harness_changes(name, fixed) == []


def test_switching_a_check_off_is_caught():
    silenced = _script("test_rows_in_train", "train_broken",
                       [("findings = validate_data(data.x_train, data.y_train, data.x_val, "
                         "data.y_val)", "findings = []")])
    changed = harness_changes("test_rows_in_train", silenced)
    assert changed and "validate_data" in changed[0]


def test_recording_the_loss_as_readme_advises_is_not_a_change_of_the_harness():
    fixed = _script("dead_relu", "train_fixed",
                    [("debugger.record_loss(loss.item())", "debugger.record_loss(loss.detach())")])
    assert harness_changes("dead_relu", fixed) == []
    dropped = _script("dead_relu", "train_fixed",
                      [("debugger.record_loss(loss.item())", "pass")])
    assert harness_changes("dead_relu", dropped) == ["debugger.record_loss(loss.item())"]


def test_the_catalogues_own_function_is_not_a_repair():
    from broken_models import CATALOGUE

    assert harness_changes("dead_relu", CATALOGUE["dead_relu"].train_fixed)


def test_harness_lines_pick_the_measuring_code():
    source = "x = 1\nwith NetworkDebugger(model) as debugger:\n    loss.backward()\n" \
             "    debugger.record_loss(v)\nreturn Outcome(scores(m, d, l), debugger)\n"
    assert harness_lines(source) == ["with NetworkDebugger(model) as debugger:",
                                     "debugger.record_loss(v)",
                                     "return Outcome(scores(m, d, l), debugger)"]


def test_show_case_prints_the_card_and_shares_the_scripts_helpers(capsys):
    from broken_models import CATALOGUE
    from broken_models.case import PAGE_FIELDS
    from lesson.course.learner.clinics import find_clinic_case

    label = find_clinic_case("test_rows_in_train").ident
    namespace: dict = {}
    show_case(label, into=namespace)
    out = capsys.readouterr().out
    assert "symptom:" in out and f"def broken_{label}(seed" in out
    case = CATALOGUE["test_rows_in_train"]
    assert case.title not in out and "test_rows_in_train" not in out   # both name the bug
    assert not any(code in out for code in case.causes)
    assert "rows_in" in namespace and "digits" in namespace
    assert callable(namespace[f"broken_{label}"])
    assert "train_fixed" not in namespace and not PAGE_FIELDS & set(namespace)
    with pytest.raises(ValueError, match="no clinic case"):
        show_case("case9_99")


def test_clinic_solutions_keep_the_current_harness_of_their_cases():
    """The clinic solutions copy the catalogue's fixes; when a case page changes its measuring
    lines, regenerate the clinic (and its release) or the solution stops passing."""
    import importlib

    import nbformat

    from broken_models import CATALOGUE
    from lesson.course.learner.catalog import load_exercises

    root = Path(__file__).resolve().parents[1]
    from lesson.course.learner.clinics import ASSIGNMENTS, find_clinic_case

    clinics = [e for e in load_exercises() if e.name.startswith("clinic")]
    assert len(clinics) == len(ASSIGNMENTS)
    for ex in clinics:
        nb = nbformat.read(ex.solution(root), as_version=4)
        for cell in nb.cells:
            if not cell.metadata.get("nbgrader", {}).get("solution"):
                continue
            case = find_clinic_case(cell.id)
            module = importlib.import_module(CATALOGUE[case.name].module)
            mine = {ln.strip() for ln in cell.source.splitlines()}
            missing = [ln for ln in harness_lines(inspect.getsource(module.train_broken))
                       if ln not in mine]
            assert not missing, f"{ex.name}/{case.ident}: the case's harness changed: {missing}"
            assert f"def {case.repair}(seed" in cell.source


def test_a_diagnosis_is_graded_as_the_cause_and_a_consequence_is_called_one():
    from broken_models import CATALOGUE
    from lesson.course.learner.clinic import judge_diagnosis

    for name, case in CATALOGUE.items():
        for code in case.causes:
            assert judge_diagnosis(name, code).right, (name, code)
        for code in case.consequences:
            verdict = judge_diagnosis(name, code)
            assert verdict.kind == "consequence" and "consequence" in verdict.message
            assert not any(c in verdict.message for c in case.causes)   # the answer stays hidden
    assert judge_diagnosis("dead_relu", "OVERFITTING").kind == "unrelated"
    assert judge_diagnosis("dead_relu", None).kind == "missing"
    not_code = judge_diagnosis("dead_relu", "DEAD")
    assert not_code.kind == "not a code" and "quotes" in not_code.message


@pytest.mark.parametrize("name", CASES + ["overfitting", "frozen_layer_moves", "lr_too_high"])
def test_the_catalogues_fix_keeps_the_set_up(name):
    assert setup_changes(name, _script(name, "train_fixed")) == []


@pytest.mark.parametrize("name,edit", [
    ("log_of_zero", ("lr=0.05", "lr=0.005")),
    ("softmax_overflow", ("lr=0.1", "lr=0.01")),
])
def test_a_lower_learning_rate_around_a_numerics_bug_hides_it_and_is_refused(name, edit):
    """The student tester's repair: the broken script with only its learning rate lowered. The
    unsafe log/exp is still there, the NaN just never comes within the run: the run looks
    healthy (the symptom is hidden), and the set-up guard refuses it."""
    hidden = _script(name, "train_broken", [edit])
    assert evaluate_repair(name, hidden, seed=0).healthy        # what used to pass
    changed = setup_changes(name, hidden)
    assert changed and "lr=" in changed[0], changed


def test_fewer_steps_are_refused_but_stopping_early_is_a_fix_for_overfitting():
    fewer = _script("dead_relu", "train_fixed", [("range(100)", "range(20)")])
    assert setup_changes("dead_relu", fewer) == ["keep range(100)"]
    early = _script("overfitting", "train_broken", [("range(200)", "range(40)")])
    assert setup_changes("overfitting", early) == []


def test_the_set_up_is_read_however_it_is_written():
    """Honest rewrites keep the set-up: a positional or re-spelled learning rate, an optimizer
    given only the trainable parameters, another loop variable."""
    plain = "def f():\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" \
            "    for step in range(100):\n        pass\n"
    rewritten = "def f():\n    from torch import optim\n" \
                "    opt = optim.SGD([p for p in model.parameters() if p.requires_grad], 1e-1)\n" \
                "    for i in range(100):\n        pass\n"
    assert training_setup(plain) == training_setup(rewritten) == {"SGD(lr=0.1)", "range(100)"}
