"""The clinic's guard: a repair must fix the bug, not switch the measuring off."""
from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from lesson.course.learner.clinic import (evaluate_repair, harness_changes, harness_lines,
                                          judge_diagnosis, judge_repair, show_case)

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

    for name, case in CATALOGUE.items():
        kinds = [judge_diagnosis(name, code).kind for code in case.causes]
        assert "cause" in kinds and set(kinds) <= {"cause", "consequence"}, (name, kinds)
        for code in case.consequences:
            verdict = judge_diagnosis(name, code)
            assert verdict.kind == "consequence" and "consequence" in verdict.message
            assert not any(c in verdict.message for c in case.causes)   # the answer stays hidden
    assert judge_diagnosis("dead_relu", "OVERFITTING").kind == "unrelated"
    assert judge_diagnosis("dead_relu", None).kind == "missing"
    assert judge_diagnosis("dead_relu", 3).kind == "not a code"


def test_a_code_is_read_in_any_letter_case_and_a_near_miss_is_named():
    """The student tester's "dead_neurons" in quotes got "a code is a string in quotes"."""
    assert judge_diagnosis("dead_relu", "dead_neurons").right
    assert judge_diagnosis("dead_relu", " Dead_Neurons ").right
    assert judge_diagnosis("dead_relu", "dead neurons").right
    near = judge_diagnosis("dead_relu", "DEAD_NEURON")
    assert near.kind == "not a code" and "DEAD_NEURONS?" in near.message
    far = judge_diagnosis("dead_relu", "it is broken")
    assert far.kind == "not a code" and "upper case" in far.message


@pytest.mark.parametrize("name", CASES + ["overfitting", "frozen_layer_moves", "lr_too_high"])
def test_the_catalogues_fix_passes_the_repair_judgement(name):
    verdict = judge_repair(name, _script(name, "train_fixed"), seed=0)
    assert verdict.passed, verdict.message
    assert "target: reached" in verdict.message and "findings: none" in verdict.message


@pytest.mark.parametrize("name,edit", [
    ("log_of_zero", ("lr=0.05", "lr=0.005")),
    ("softmax_overflow", ("lr=0.1", "lr=0.01")),
])
def test_a_lower_learning_rate_around_a_numerics_bug_hides_it_and_is_refused(name, edit):
    """The student tester's repair: the broken script with only its learning rate lowered. The
    unsafe log/exp is still there, the NaN just never comes within the run: the run looks
    healthy (the symptom is hidden), and the judgement refuses it, saying what changed."""
    hidden = _script(name, "train_broken", [edit])
    assert evaluate_repair(name, hidden, seed=0).healthy        # what used to pass
    verdict = judge_repair(name, hidden, seed=0)
    assert not verdict.passed
    assert [c.kind for c in verdict.hiding] == ["lr_lowered"]
    assert "learning rate of Adam lowered from" in verdict.message
    assert "target: reached" in verdict.message and "findings: none" in verdict.message


def test_fewer_steps_are_refused_but_stopping_early_is_a_fix_for_overfitting():
    fewer = _script("dead_relu", "train_fixed", [("range(100)", "range(20)")])
    verdict = judge_repair("dead_relu", fewer, seed=0)
    assert [c.kind for c in verdict.hiding] == ["fewer_steps"], verdict.message
    assert "fewer steps: Adam steps 20 times, where the training runs 100 steps" in verdict.message
    early = _script("overfitting", "train_broken", [("range(200)", "range(40)")])
    judged = judge_repair("overfitting", early, seed=0)
    assert judged.hiding == [] and [c.kind for c in judged.real] == ["fewer_steps"]


def test_the_set_up_is_read_however_it_is_written():
    """Honest rewrites keep the set-up (a learning rate from a config dict, given
    positionally); a rate lowered after the optimizer is built is still a lower rate."""
    config = _script("log_of_zero", "train_fixed", [
        ("    torch.manual_seed(seed)", "    config = {'lr': 5e-2}\n    torch.manual_seed(seed)"),
        ("lr=0.05", "lr=config['lr']")])
    assert judge_repair("log_of_zero", config, seed=0).passed
    positional = _script("log_of_zero", "train_fixed", [("lr=0.05", "0.05")])
    assert judge_repair("log_of_zero", positional, seed=0).passed
    late = _script("log_of_zero", "train_broken", [(
        "lr=0.05)\n", "lr=0.05)\n    for group in optimizer.param_groups:\n"
                      "        group['lr'] = 0.005\n")])
    verdict = judge_repair("log_of_zero", late, seed=0)
    assert [c.kind for c in verdict.hiding] == ["lr_lowered"], verdict.message
