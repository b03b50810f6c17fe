"""Every catalogue case is a graded clinic exercise under a neutral label: the notebooks are
generated from the case pages (and fail this test when stale), the release names no bug before
it is solved, and the learner loop (`check`, `hint`, progress) works per case."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from broken_models import CATALOGUE, PAGES
from lesson.course.learner import clinic_notebooks
from lesson.course.learner.catalog import case_exercise, find_exercise, load_exercises
from lesson.course.learner.clinics import ASSIGNMENTS, clinic_cases, find_clinic_case
from lesson.course.learner.progress import DONE, FAILING, NOT_STARTED, Progress
from tests.test_learner import EXERCISES, ROOT, cli, course_copy

CLINIC = "clinic1_not_learning"


def _released(case) -> nbformat.NotebookNode:
    return nbformat.read(find_exercise(case.assignment, EXERCISES).released(ROOT), as_version=4)


def _answer(root: Path, case, source: str) -> None:
    """Type `source` into the case's answer cell of the learner's notebook."""
    path = find_exercise(case.assignment, EXERCISES).released(root)
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == case.ident)
    cell.source = source
    nbformat.write(nb, path)


def test_every_case_of_the_catalogue_is_a_clinic_exercise():
    labels = {c.name: c.ident for c in clinic_cases()}
    assert sorted(labels) == sorted(CATALOGUE) and len(labels) == len(PAGES)
    for case in clinic_cases():
        for folder in ("solutions", "exercises"):
            ex = find_exercise(case.assignment, EXERCISES)
            nb = nbformat.read(ROOT / folder / ex.name / ex.notebook, as_version=4)
            ids = {c.get("id") for c in nb.cells}
            assert {case.ident, *case.test_ids} <= ids, (folder, case.ident, case.name)
        assert len(case.hints) == 3 and all(case.hints)
    assert sorted(e.name for e in EXERCISES if e.name.startswith("clinic")) == \
        sorted(folder for folder, _ in ASSIGNMENTS.values())


def test_committed_clinic_notebooks_are_the_generated_ones():
    assert clinic_notebooks.stale(ROOT) == [], \
        "run: python -m lesson.course.learner.clinic_notebooks, then make release"


def test_a_new_case_page_makes_its_clinic_stale(tmp_path, monkeypatch):
    clinic_notebooks.write_all(tmp_path)
    assert clinic_notebooks.stale(tmp_path) == []
    import lesson.course.learner.clinics as clinics

    extra = clinics.ClinicCase("case2_99", 2, 99, "log_of_zero")
    cases = (*clinic_cases(), extra)
    monkeypatch.setattr(clinics, "_all", lambda: cases)
    assert [p.parent.name for p in clinic_notebooks.stale(tmp_path)] == ["clinic2_nan_inf"]


@pytest.mark.parametrize("case", clinic_cases(), ids=lambda c: c.ident)
def test_the_release_names_no_bug_before_it_is_solved(case):
    """Headings, the shown script's label, the cells' ids and the visible tests say nothing of
    the bug: neither the case's name, nor its title, nor a code of its cause."""
    text = "\n".join(c.source for c in _released(case).cells)
    assert case.name not in text
    assert case.case.title not in text
    for code in case.case.causes:
        assert f'"{code}"' not in text


def test_show_case_prints_no_name_title_or_cause(capsys):
    from lesson.course.learner.clinic import show_case

    for case in clinic_cases():
        show_case(case.ident)
        out = capsys.readouterr().out
        assert case.name not in out and case.case.title not in out, case.ident
        assert case.heading in out


def test_a_case_is_found_by_label_and_its_hints_come_from_the_page():
    case = find_clinic_case("case1_3")
    assert find_clinic_case("1.3") == case and case.name == "dead_relu"
    page = CATALOGUE["dead_relu"]
    assert f'"{page.lesson}"' in case.hints[0] and page.evidence in case.hints[1]
    assert page.change in case.hints[2]
    ex = case_exercise("case1_3")
    assert ex.assignment == CLINIC and ex.hints == case.hints
    assert set(ex.tests) == set(case.test_ids) and ex.answer_cells == (case.ident,)
    with pytest.raises(ValueError, match="no clinic case"):
        find_clinic_case("case1_99")
    with pytest.raises(TypeError, match="string"):
        find_clinic_case(3)


def test_hint_for_a_case_goes_from_general_to_specific(tmp_path, capsys):
    root = course_copy(tmp_path, names=[CLINIC])
    case = find_clinic_case("case1_3")
    for expected in case.hints:
        assert cli("hint", root, "case1_3") == 0
        assert expected in capsys.readouterr().out
    assert Progress(root).get("case1_3").hints_shown == 3


def test_check_of_one_case_runs_its_tests_only_and_keeps_progress_per_case(tmp_path, capsys):
    """The student's path through one case: blank, a syntax error, a consequence, an
    unrelated code, then the right diagnosis and repair."""
    root = course_copy(tmp_path, names=[CLINIC])
    case = find_clinic_case("missing_zero_grad")
    label = case.ident

    assert cli("check", root, label) == 1
    out = capsys.readouterr().out
    assert Progress(root).get(label).status == NOT_STARTED
    assert "not started" in out and "missing_zero_grad" not in out

    _answer(root, case, f'diagnosis["{label}"] = "MISSING_ZERO_GRAD"\ndef {case.repair}(seed:\n')
    cli("check", root, label)
    out = capsys.readouterr().out
    assert "SyntaxError" in out and label in out.split("SyntaxError")[0]
    assert Progress(root).get(label).status == FAILING

    for code, kind in [("LR_TOO_HIGH", "consequence"), ("OVERFITTING", "not what is wrong")]:
        _answer(root, case, f'diagnosis["{label}"] = "{code}"\n')
        cli("check", root, label)
        out = capsys.readouterr().out
        assert kind in out, out
        assert "MISSING_ZERO_GRAD" not in out and "missing_zero_grad" not in out
        assert f"test_{label}_diagnosis" in out

    from tests.test_course import _solution_source
    _answer(root, case, _solution_source(CLINIC, label))
    assert cli("check", root, label) == 0
    out = capsys.readouterr().out
    assert case.solved_line in out                    # named once solved
    assert "Next: nndebug check case1_1" in out       # the clinic's first case not done
    assert Progress(root).get(label).status == DONE
    assert Progress(root).get(find_clinic_case("dead_relu").ident).status == NOT_STARTED


def test_the_exercise_table_counts_cases_per_clinic(tmp_path, capsys):
    root = course_copy(tmp_path, names=[CLINIC])
    assert cli("exercises", root) == 0
    out = capsys.readouterr().out
    n = len(clinic_cases("not_learning"))
    assert f"(0/{n} cases done)" in out


def test_bad_case_labels_are_clear_errors(tmp_path, capsys):
    root = course_copy(tmp_path, names=[CLINIC])
    assert cli("check", root, "case1_99") == 2
    assert "no clinic case" in capsys.readouterr().out


def test_load_exercises_lists_each_clinic_once():
    names = [e.name for e in load_exercises()]
    assert len(names) == len(set(names))


def test_watch_on_a_case_waits_for_that_case_and_checks_it(tmp_path, capsys):
    """Another case's answer saved: this case is still not started. Its own answer saved: it
    is checked."""
    from lesson.course.learner import commands

    root = course_copy(tmp_path, names=[CLINIC])
    mine, other = find_clinic_case("case1_3"), find_clinic_case("case1_4")
    chosen = case_exercise(mine.ident)
    path = chosen.released(root)
    checked, sleeps = [], []

    def save(case) -> None:
        import os

        _answer(root, case, f'diagnosis["{case.ident}"] = "DEAD_NEURONS"\n')
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000 * (len(sleeps) + 1)))

    def sleep(seconds):
        sleeps.append(seconds)
        save(other if len(sleeps) == 1 else mine)

    code = commands.watch(root, EXERCISES, chosen, interval=0.5, max_checks=1, sleep=sleep,
                          checker=lambda r, e: checked.append(e.name) or 1)
    assert code == 0 and checked == [mine.ident] and len(sleeps) == 2
    out = capsys.readouterr().out
    assert out.count("not started") == 2 and mine.name not in out


def _edited_repair(case, edits) -> str:
    """The case's broken script with `edits` (lesson.course.learner.script_edits) applied,
    as the student's repair: its source, renamed repaired_<label>."""
    import importlib
    import inspect
    import textwrap

    module = importlib.import_module(case.case.module)
    source = textwrap.dedent(inspect.getsource(module.train_broken))
    source = source.replace("def train_broken(", f"def {case.repair}(", 1)
    for edit in edits:
        source = edit(source)
    return "import lesson.course.learner.script_edits as _nndebug_edit\n\n" + source


@pytest.mark.slow
def test_a_student_walks_a_case_from_a_wrong_repair_through_a_hider_to_the_fix(tmp_path, capsys):
    """The student tester's path through the high-learning-rate case, with `nndebug check`:
    a rate lowered too little (the repair test shows the target and the value reached, and the
    findings, although the diagnosis is still wrong); the rate kept and clipping added (the
    run looks healthy: told what was changed and what is still there); the real fix, with the
    code written in lower case."""
    from lesson.course.learner.script_edits import clip_gradients, lower_lr

    root = course_copy(tmp_path, names=[CLINIC])
    case = find_clinic_case("lr_too_high")
    label = case.ident

    _answer(root, case, f'diagnosis["{label}"] = "EXPLODING_GRADIENT"\n\n'
            + _edited_repair(case, [lower_lr(2)]))
    assert cli("check", root, label) == 1
    out = capsys.readouterr().out
    assert "consequence" in out                                      # the diagnosis test
    assert f"failure, test_{label}_repair" in out                    # shown all the same
    assert "target: missed:" in out and re.search(r"validation accuracy 0\.\d+ \(needs >= 0\.9\)", out)
    assert "findings: LR_TOO_HIGH" in out
    assert "lr_too_high" not in out

    _answer(root, case, f'diagnosis["{label}"] = "EXPLODING_GRADIENT"\n\n'
            + _edited_repair(case, [clip_gradients(1.0)]))
    assert cli("check", root, label) == 1
    out = capsys.readouterr().out
    assert "changed where the bug is not: gradient clipping added" in out, out
    assert "still there: the learning rate of" in out
    assert "target: reached" in out and "findings: none" in out    # a symptom hidden, not fixed

    _answer(root, case, f'diagnosis["{label}"] = "lr_too_high"\n\n'
            + _edited_repair(case, [lower_lr(10)]))
    assert cli("check", root, label) == 0
    out = capsys.readouterr().out
    assert case.solved_line in out and "the repair passes" in out
    assert Progress(root).get(label).status == DONE
