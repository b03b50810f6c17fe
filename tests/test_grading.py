"""Grades an instructor can trust: a simulated class graded through both paths, plain
`nbgrader autograde` (the clean room hooked in by nbgrader_config.py) and `nndebug grade`
on a local Dask cluster, with real nbgrader, real gradebooks and real sandboxes; its honest
students also through nbgrader's own Execute (their kernel), which the clean room must match
cell by cell."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from lesson.course.grading import gradebook as gbk
from lesson.course.grading.feedback import hidden_source, leaks
from lesson.course.grading.simulated import (ASSIGNMENTS, DEAD_RELU, EDITS, FAULTS, GARBLED,
                                             KERNEL_EXECUTE, TAMPERING, honest, submissions)
from lesson.course.learner.classroom import (copy_course, generate_release,
                                             nbgrader, submit)

ROOT = Path(__file__).resolve().parents[1]
#: the class's limits, the same in every path (a loop costs TIMEOUT once, a kernel's too)
TIMEOUT, BUDGET = "30", "600"

#: technique -> the points its student's honest part can earn at most
HONEST_PART = {
    "rebinding test-cell names": 0,                  # nothing of clinic 1 is done
    "patching lesson/broken_models classes and functions": 2,   # the two diagnoses
    "patching math/numpy comparison helpers": 2,     # exploding_steps is honest (but needs
    "rigged comparison objects": 4,                  # total_grad_norm) / its other two answers
    "sys.exit/os._exit in an answer": 2,             # total_grad_norm
    "reading hidden tests or solutions from disk": 3,    # numerical_gradient
    "writing to the gradebook": 0,                   # every test needs numerical_gradient
    "a thread or child process left running": 2,     # total_grad_norm
    "globals(), sys.modules and builtins": 0,
}


def nndebug(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]))
    return subprocess.run([sys.executable, "-c", "import sys; from lesson.course.cli import main; "
                           "sys.exit(main())", "grade", "--no-progress", *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=1800)


def _cells(url: str, student: str, assignment: str) -> dict[str, tuple[float, float]]:
    return gbk.cell_scores(url, student, assignment)


@dataclass
class Graded:
    """The class graded three ways: the course roots and what each command printed."""

    nbgrader: Path          # plain nbgrader autograde, the clean room through the config
    nndebug: Path           # nndebug grade --workers 2
    kernel: Path            # plain nbgrader autograde with nbgrader's Execute (honest only)
    run: subprocess.CompletedProcess          # nndebug grade
    plain: subprocess.CompletedProcess        # nbgrader autograde (clean room)


def _grade(base: Path) -> dict:
    template = copy_course(ROOT, base / "template")
    generate_release(template)
    roots = {}
    for path in ("nbgrader", "nndebug", "kernel"):
        root = base / path
        shutil.copytree(template, root)
        for (student, assignment), nb in submissions(ROOT / "solutions", root,
                                                     base / "drafts" / path, faults=True).items():
            if path != "kernel" or honest(student):
                submit(root, student, assignment, nb)
        roots[path] = root
    with (roots["kernel"] / "nbgrader_config.py").open("a") as f:
        f.write(KERNEL_EXECUTE)
    with ThreadPoolExecutor(2) as pool:                    # each grades one notebook at a time
        plain = pool.submit(nbgrader, roots["nbgrader"], "autograde", "*", "--force",
                            f"--CleanRoomExecute.timeout={TIMEOUT}",
                            f"--CleanRoomExecute.budget={BUDGET}", check=False)
        kernel = pool.submit(nbgrader, roots["kernel"], "autograde", "*", "--force",
                             f"--Execute.timeout={TIMEOUT}", check=False)
        plain, kernel = plain.result(), kernel.result()
    nbgrader(roots["nbgrader"], "generate_feedback", "*", "--force", check=False)
    nbgrader(roots["nbgrader"], "export", "--to", "grades.csv")
    run = nndebug(roots["nndebug"], "--workers", "2", "--timeout", TIMEOUT, "--budget", BUDGET,
                  "--export", "class.csv", "--feedback")
    return {"roots": {k: str(v) for k, v in roots.items()},
            "run": [run.returncode, run.stdout, run.stderr],
            "plain": [plain.returncode, plain.stdout, plain.stderr]}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    """The class graded once per test run: with pytest-xdist the first worker that needs it
    grades it under a file lock and the others read where it is."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    summary = shared / "graded_simulated_class.json"
    with FileLock(str(shared / "graded_simulated_class.lock")):
        if not summary.is_file():
            summary.write_text(json.dumps(_grade(shared / "simulated_class")))
        data = json.loads(summary.read_text())
    roots = {k: Path(v) for k, v in data["roots"].items()}
    done = {k: subprocess.CompletedProcess("", *data[k]) for k in ("run", "plain")}
    return Graded(roots["nbgrader"], roots["nndebug"], roots["kernel"], done["run"],
                  done["plain"])


def _copy(graded: Graded, tmp_path: Path) -> Path:
    """A copy of the nndebug-graded course to grade again (the shared one stays as it is)."""
    return Path(shutil.copytree(graded.nndebug, tmp_path / "course", symlinks=True))


def _both(graded: Graded) -> list[tuple[str, str]]:
    return [("nbgrader autograde", gbk.db_url(graded.nbgrader, None)),
            ("nndebug grade", gbk.db_url(graded.nndebug, None))]


def _csv(path: Path) -> dict[tuple[str, str], dict]:
    with path.open(newline="") as f:
        return {(row["student_id"], row["assignment"]): row for row in csv.DictReader(f)}


GARBLED_KEY = GARBLED[:2]


@pytest.mark.slow
def test_nndebug_grade_ran_and_wrote_nbgraders_gradebook(graded):
    root, run = graded.nndebug, graded.run
    assert run.returncode == 1, run.stdout + run.stderr        # the garbled notebook
    (last,) = [ln for ln in run.stderr.splitlines() if ln.startswith("nndebug grade:")]
    assert "1 submissions could not be graded: garbled/ex5_gradient_check" in last
    url = gbk.db_url(root, None)
    scores = gbk.scores(url)
    expected = len(ASSIGNMENTS) + len(EDITS) + len(TAMPERING) + len(FAULTS) + 1
    assert len(scores) == expected
    exported = _csv(root / "class.csv")                 # every student x every assignment
    assert {k for k, row in exported.items() if row["status"] != "not submitted"} == set(scores)
    for key, (score, top) in scores.items():
        assert exported[key]["score"] == ("" if score is None else str(score)), key
        assert float(exported[key]["max_score"]) == top
    assert exported_by_nbgrader(root) == scores
    assert "student" in run.stdout and "ex1_exploding_gradients" in run.stdout   # the table
    assert any((root / "feedback").rglob("*.html"))


def exported_by_nbgrader(root: Path) -> dict:
    """`nbgrader export` through the course's plugin: (student, assignment) -> (score or
    None, max) for the submissions it holds."""
    nbgrader(root, "export", "--to", "again.csv")
    return {k: (float(r["score"]) if r["score"] else None, float(r["max_score"]))
            for k, r in _csv(root / "again.csv").items() if r["status"] != "not submitted"}


@pytest.mark.slow
def test_both_paths_give_the_same_grades_cell_by_cell(graded):
    (_, a), (_, b) = _both(graded)
    assert gbk.scores(a) == gbk.scores(b)
    for student, assignment in gbk.scores(a):
        if (student, assignment) != GARBLED_KEY:
            assert _cells(a, student, assignment) == _cells(b, student, assignment), student


@pytest.mark.slow
def test_the_clean_room_and_a_kernel_agree_on_every_honest_submission(graded):
    """nbgrader's own Execute runs the honest students in their kernel; the clean room gives
    each test cell the same points, faults included (an endless loop, a loop after right
    definitions, syntax and indentation errors, an error raised, an edited test)."""
    kernel = gbk.db_url(graded.kernel, None)
    compared = 0
    for path, url in _both(graded):
        for (student, assignment), (score, _) in gbk.scores(kernel).items():
            assert honest(student)
            if (student, assignment) == GARBLED_KEY:
                continue
            assert _cells(url, student, assignment) == _cells(kernel, student, assignment), \
                (path, student, assignment)
            compared += 1
    assert compared == 2 * (len(ASSIGNMENTS) + len(EDITS) + len(FAULTS))


@pytest.mark.slow
def test_solutions_and_honest_alternatives_get_full_marks(graded):
    for path, url in _both(graded):
        table = gbk.scores(url)
        for assignment in ASSIGNMENTS:
            score, top = table[("model", assignment)]
            assert top > 0 and score == top, (path, assignment, _cells(url, "model", assignment))
        for student, assignment in [k for k in EDITS if k[0] == "honest"] + [
                ("toploop", "ex5_gradient_check")]:     # right definitions, then a loop
            score, top = table[(student, assignment)]
            assert score == top, (path, assignment, _cells(url, student, assignment))


@pytest.mark.slow
def test_wrong_and_symptom_hiding_answers_lose_their_points(graded):
    for path, url in _both(graded):
        assert _cells(url, "wrong", "ex1_exploding_gradients")["test_exploding_steps"][0] == 0
        hider = _cells(url, "hider", "clinic1_not_learning")
        assert hider[f"test_{DEAD_RELU}_repair"][0] == 0, path     # lower lr keeps the bug
        assert hider[f"test_{DEAD_RELU}_diagnosis"][0] == 1        # its right diagnosis counts


@pytest.mark.slow
@pytest.mark.parametrize("technique", sorted(TAMPERING))
def test_a_tampering_student_scores_at_most_its_honest_part(graded, technique):
    student, assignment, cells = TAMPERING[technique]
    for path, url in _both(graded):
        score, top = gbk.scores(url)[(student, assignment)]
        assert score <= HONEST_PART[technique] < top, (path, technique,
                                                       _cells(url, student, assignment))


@pytest.mark.slow
def test_caught_tampering_is_explained_in_the_feedback_listed_and_exported(graded):
    root, run = graded.nndebug, graded.run
    caught = sorted({s for t, (s, _, _) in TAMPERING.items()
                     if t != "rigged comparison objects"})   # that one simply fails
    listed = run.stdout.split("tampering caught")[-1]
    for student in caught:
        assert f"{student}/" in listed, (student, run.stdout[-2000:])
    for course in (graded.nbgrader, root):
        autograded = course / "autograded" / "reader" / "ex5_gradient_check" / "gradient_check.ipynb"
        nb = json.loads(autograded.read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", [])
                  if o.get("ename") == "Tampering"]
        assert errors and "solutions/ex5_gradient_check" in errors[0]["evalue"]
        html = (course / "feedback" / "reader" / "ex5_gradient_check" / "gradient_check.html")
        assert "reached into the grader" in html.read_text()
    for exported in (_csv(root / "class.csv"), _csv(graded.nbgrader / "grades.csv")):
        row = exported[("reader", "ex5_gradient_check")]
        assert row["status"].startswith("tampering: opened ") and "solutions" in row["status"]
        assert exported[("model", "ex5_gradient_check")]["status"] == "graded"


@pytest.mark.slow
def test_the_gradebook_survives_a_student_writing_to_it(graded):
    for path, url in _both(graded):
        assert gbk.scores(url)[("model", "ex5_gradient_check")][0] == 9, path
        cells = _cells(url, "writer", "ex5_gradient_check")
        assert cells["test_numerical_gradient"][0] == 0


@pytest.mark.slow
def test_an_ungraded_submission_is_never_shown_as_zero(graded):
    """The garbled notebook: no score in either export, `x` and why in the table, listed,
    no feedback page; the rest of its class graded."""
    for course, exported in ((graded.nbgrader, "grades.csv"), (graded.nndebug, "class.csv")):
        row = _csv(course / exported)[GARBLED_KEY]
        assert row["score"] == row["raw_score"] == "", row
        assert row["status"].startswith("ungraded: gradient_check.ipynb is not a readable "
                                        "notebook"), row
        assert gbk.scores(gbk.db_url(course, None))[GARBLED_KEY][0] is None
        assert not (course / "feedback" / "garbled").exists()
    table = next(ln for ln in graded.run.stdout.splitlines() if ln.startswith("garbled "))
    assert "x not a notebook" in table and "0/" not in table
    assert "garbled/ex5_gradient_check: gradient_check.ipynb is not a readable notebook" \
        in graded.run.stdout


@pytest.mark.slow
def test_faults_are_named_with_their_cell_and_line_in_both_paths(graded):
    run = graded.run.stdout
    assert ("syntax/ex5_gradient_check: locate_bad_parameter: SyntaxError at line 8 of answer "
            "cell locate_bad_parameter: expected ':'") in run
    assert ("indent/ex1_exploding_gradients: exploding_steps: IndentationError at line 4 of "
            "answer cell exploding_steps: unexpected indent") in run
    assert re.search(r"toploop/ex5_gradient_check: numerical_gradient: cell numerical_gradient "
                     r"ran past the time limit \(30 s, interrupted\); what it defined before "
                     r"line \d+ still counts", run)
    assert "looper/ex1_exploding_gradients: test_suggest_clip_value: suggest_clip_value ran " \
           "longer than 30 s (interrupted)" in run
    assert "sandbox exited" not in run
    for course in (graded.nbgrader, graded.nndebug):
        nb = json.loads((course / "autograded" / "raiser" / "ex5_gradient_check" /
                         "gradient_check.ipynb").read_text())
        errors = {c["metadata"]["nbgrader"]["grade_id"]: o for c in nb["cells"]
                  for o in c.get("outputs", []) if o["output_type"] == "error"}
        text = "".join(errors["test_locate"]["traceback"])
        assert 'File "<cell locate_bad_parameter>", line 5, in locate_bad_parameter' in text
        assert "raise KeyError(f'not done yet: {sorted(named)[0]}')" in text
        assert "<answer" not in text
        page = (course / "feedback" / "raiser" / "ex5_gradient_check" / "gradient_check.html")
        assert 'File "&lt;cell locate_bad_parameter&gt;", line 5' in page.read_text()
    looper = _cells(gbk.db_url(graded.nndebug, None), "looper", "ex1_exploding_gradients")
    assert looper["test_suggest_clip_value"][0] == 0
    assert all(s == top for k, (s, top) in looper.items() if k != "test_suggest_clip_value")


@pytest.mark.slow
def test_no_feedback_page_of_either_path_shows_a_hidden_test(graded):
    pages = 0
    for course in (graded.nbgrader, graded.nndebug):
        for assignment, notebook in ASSIGNMENTS.items():
            hidden = hidden_source(ROOT / "solutions" / assignment / f"{notebook}.ipynb",
                                   ROOT / "exercises" / assignment / f"{notebook}.ipynb")
            assert hidden
            for page in (course / "feedback").glob(f"*/{assignment}/{notebook}.html"):
                assert not leaks(page, hidden), (page, leaks(page, hidden))
                pages += 1
    assert pages >= 2 * (len(ASSIGNMENTS) + len(EDITS) + len(TAMPERING))


@pytest.mark.slow
def test_plain_autograde_prints_one_line_per_submission_and_the_warnings_that_matter(graded):
    out = graded.plain.stdout + graded.plain.stderr
    summaries = re.findall(r"^(\w+)/(\w+): [\d.]+/[\d.]+ (graded|late|tampering: .*) \(\d+ s\)$",
                           graded.plain.stdout, re.M)
    submitted = {(p.parent.parent.name, p.parent.name)
                 for p in (graded.nbgrader / "submitted").glob("*/*/*.ipynb")}
    assert {(s, a) for s, a, _ in summaries} == submitted - {GARBLED_KEY}
    checksum = re.findall(r"Attribute 'checksum' for cell (\w+) has changed", out)
    assert checksum == ["test_exploding_steps"]          # the editor's, and only it
    for noise in ("SAWarning", "SADeprecationWarning", "MovedIn20Warning", "| INFO]"):
        assert noise not in out, noise
    assert "garbled" in out                                # nbgrader names the failure


@pytest.mark.slow
def test_grading_again_takes_only_new_changed_or_ungraded_submissions(graded, tmp_path):
    root = _copy(graded, tmp_path)
    again = nndebug(root, "--workers", "1")
    assert again.returncode == 1 and "0 graded, 1 could not be graded" in again.stdout
    skipped = len(gbk.scores(gbk.db_url(root, None))) - 1
    assert f"{skipped} unchanged submissions skipped" in again.stdout      # garbled retried
    one = nndebug(root, "--workers", "1", "--student", "wrong", "--student", "partial")
    assert one.returncode == 0 and "2 graded, 0 could not" in one.stdout, one.stdout
    folder = root / "submitted" / "wrong" / "ex1_exploding_gradients"
    shutil.copy(ROOT / "solutions" / "ex1_exploding_gradients" / "exploding_gradients.ipynb",
                folder / "exploding_gradients.ipynb")    # the student fixed it
    fixed = nndebug(root, "--workers", "1", "ex1_exploding_gradients")
    assert fixed.returncode == 0 and "1 graded" in fixed.stdout, fixed.stdout
    score, top = gbk.scores(gbk.db_url(root, None))[("wrong", "ex1_exploding_gradients")]
    assert score == top


@pytest.mark.slow
def test_another_gradebook_is_graded_in_full(graded, tmp_path):
    """What counts as graded is read from the gradebook being written: a new one gets every
    submission, an export of it gives the same grades."""
    root = _copy(graded, tmp_path)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    run = nndebug(root, "--workers", "2", "--timeout", TIMEOUT, "--budget", BUDGET,
                  "ex5_gradient_check", "--db", other)
    ex5 = {k: v for k, v in gbk.scores(gbk.db_url(root, None)).items()
           if k[1] == "ex5_gradient_check"}
    assert "skipped" not in run.stdout and f"{len(ex5) - 1} graded, 1 could not" in run.stdout
    assert gbk.scores(other) == ex5
