"""Grades an instructor can trust: a simulated class graded through both paths, plain
`nbgrader autograde` (the clean room hooked in by nbgrader_config.py) and `nndebug grade`
on a local Dask cluster, with real nbgrader, real gradebooks and real sandboxes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lesson.course.grading import gradebook as gbk
from lesson.course.grading.simulated import ASSIGNMENTS, DEAD_RELU, EDITS, TAMPERING, submissions
from lesson.course.learner.classroom import (autograde, copy_course, export_grades, generate_release,
                                      submit)

ROOT = Path(__file__).resolve().parents[1]

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
                          env=env, capture_output=True, text=True, timeout=900)


def _cells(url: str, student: str, assignment: str) -> dict[str, tuple[float, float]]:
    return gbk.cell_scores(url, student, assignment)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded twice: `nbgrader autograde` in one course copy, `nndebug grade
    --workers 2` in another. Returns (nbgrader root, nndebug root, nndebug's completed run)."""
    base = tmp_path_factory.mktemp("grading")
    template = copy_course(ROOT, base / "template")
    generate_release(template)
    roots = {}
    for path in ("nbgrader", "nndebug"):
        root = base / path
        shutil.copytree(template, root)
        for (student, assignment), nb in submissions(ROOT / "solutions", root,
                                                     base / "drafts" / path).items():
            submit(root, student, assignment, nb)
        roots[path] = root
    autograde(roots["nbgrader"])
    run = nndebug(roots["nndebug"], "--workers", "2", "--export", "class.csv", "--feedback")
    return roots["nbgrader"], roots["nndebug"], run


def _both(graded):
    nbg, ndb, _ = graded
    return [("nbgrader autograde", gbk.db_url(nbg, None)), ("nndebug grade", gbk.db_url(ndb, None))]


@pytest.mark.slow
def test_nndebug_grade_ran_and_wrote_nbgraders_gradebook(graded):
    _, root, run = graded
    assert run.returncode == 0, run.stdout + run.stderr
    url = gbk.db_url(root, None)
    assert (root / "class.csv").read_text().count("\n") == len(gbk.scores(gbk.db_url(root, None))) + 1
    exported = export_grades(root)                     # nbgrader export reads it as its own
    assert {k: v for k, v in exported.items() if k in gbk.scores(url)} == gbk.scores(url)
    assert all(v[0] == 0 for k, v in exported.items() if k not in gbk.scores(url))
    expected = len(ASSIGNMENTS) + len(EDITS) + len(TAMPERING)
    assert len(gbk.scores(url)) == expected
    assert "student" in run.stdout and "ex1_exploding_gradients" in run.stdout   # the table
    assert any((root / "feedback").rglob("*.html"))


@pytest.mark.slow
def test_both_paths_give_the_same_grades_cell_by_cell(graded):
    (_, a), (_, b) = _both(graded)
    assert gbk.scores(a) == gbk.scores(b)
    for student, assignment in gbk.scores(a):
        assert _cells(a, student, assignment) == _cells(b, student, assignment), student


@pytest.mark.slow
def test_solutions_and_honest_alternatives_get_full_marks(graded):
    for path, url in _both(graded):
        table = gbk.scores(url)
        for assignment in ASSIGNMENTS:
            score, top = table[("model", assignment)]
            assert top > 0 and score == top, (path, assignment, _cells(url, "model", assignment))
        for student, assignment in [k for k in EDITS if k[0] == "honest"]:
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
def test_caught_tampering_is_explained_in_the_feedback_and_listed(graded):
    _, root, run = graded
    caught = sorted({s for t, (s, _, _) in TAMPERING.items()
                     if t != "rigged comparison objects"})   # that one simply fails
    listed = run.stdout.split("tampering caught")[-1]
    for student in caught:
        assert f"{student}/" in listed, (student, run.stdout[-2000:])
    for nbg_root in (graded[0], root):
        autograded = nbg_root / "autograded" / "reader" / "ex5_gradient_check" / "gradient_check.ipynb"
        nb = json.loads(autograded.read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", [])
                  if o.get("ename") == "Tampering"]
        assert errors and "solutions/ex5_gradient_check" in errors[0]["evalue"]
    html = (root / "feedback" / "reader" / "ex5_gradient_check" / "gradient_check.html").read_text()
    assert "reached into the grader" in html


@pytest.mark.slow
def test_the_gradebook_survives_a_student_writing_to_it(graded):
    for path, url in _both(graded):
        assert gbk.scores(url)[("model", "ex5_gradient_check")][0] == 9, path
        cells = _cells(url, "writer", "ex5_gradient_check")
        assert cells["test_numerical_gradient"][0] == 0


@pytest.mark.slow
def test_grading_again_takes_only_new_or_changed_submissions(graded):
    _, root, _ = graded
    again = nndebug(root, "--workers", "1")
    assert again.returncode == 0 and "unchanged submissions skipped" in again.stdout
    assert "0 graded" in again.stdout
    folder = root / "submitted" / "wrong" / "ex1_exploding_gradients"
    shutil.copy(ROOT / "solutions" / "ex1_exploding_gradients" / "exploding_gradients.ipynb",
                folder / "exploding_gradients.ipynb")    # the student fixed it
    fixed = nndebug(root, "--workers", "1", "ex1_exploding_gradients")
    assert fixed.returncode == 0 and "1 graded" in fixed.stdout, fixed.stdout
    score, top = gbk.scores(gbk.db_url(root, None))[("wrong", "ex1_exploding_gradients")]
    assert score == top


@pytest.mark.slow
def test_a_bad_submission_is_reported_and_the_rest_graded(tmp_path):
    root = copy_course(ROOT, tmp_path / "course")
    generate_release(root)
    submit(root, "model", "ex5_gradient_check",
           ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb")
    broken = root / "submitted" / "garbled" / "ex5_gradient_check" / "gradient_check.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text("{this is not json")
    (root / "submitted" / "absent" / "ex5_gradient_check").mkdir(parents=True)
    looper = json.loads((ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb").read_text())
    for cell in looper["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "numerical_gradient":
            cell["source"] = ("def numerical_gradient(loss_at, array, eps=1e-5):\n"
                              "    while True:\n        pass\n")
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "locate_bad_parameter":
            cell["source"] = ("def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
                              "    hog = [bytearray(1 << 20) for _ in range(100_000)]\n"
                              "    return len(hog)\n")
    target = root / "submitted" / "looper" / "ex5_gradient_check" / "gradient_check.ipynb"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(looper))
    run = nndebug(root, "--workers", "2", "--timeout", "5", "--memory", "2048")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "garbled/ex5_gradient_check: gradient_check.ipynb is not a readable notebook" in run.stdout
    assert "absent/ex5_gradient_check: gradient_check.ipynb was not submitted" in run.stdout
    assert "looper/ex5_gradient_check" in run.stdout and "longer than 5 s" in run.stdout
    table = gbk.scores(gbk.db_url(root, None))
    assert table[("model", "ex5_gradient_check")] == (9.0, 9.0)
    assert table[("absent", "ex5_gradient_check")][0] == 0
    looper_cells = _cells(gbk.db_url(root, None), "looper", "ex5_gradient_check")
    assert looper_cells["test_numerical_gradient"][0] == 0 and looper_cells["test_locate"][0] == 0


def test_usage_errors_exit_2(tmp_path):
    assert nndebug(tmp_path).returncode == 2                      # no nbgrader_config.py
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    assert nndebug(tmp_path, "--workers", "0").returncode == 2
    assert nndebug(tmp_path, "--db", "mysql://x").returncode == 2


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, else where Debian's postgresql-NN puts them
    (not on PATH on a fresh machine), newest version first."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return versions[-1].parent if versions else None


@pytest.fixture
def postgres(tmp_path_factory):
    """A throwaway PostgreSQL server from the machine's binaries, run as `postgres` on
    127.0.0.1; yields its URL and stops it."""
    binaries = _postgres_bin()
    if binaries is None or not shutil.which("runuser"):
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl: apt-get install postgresql-15) or "
                    "runuser not on this machine")
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="nndebug-pg-", dir="/tmp"))
    shutil.chown(folder, "postgres")
    port = _free_port()
    pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(pg + [str(binaries / "initdb"), "-D", str(folder / "data"), "-A", "trust",
                         "-U", "postgres"],
                   check=True, capture_output=True, cwd=folder)
    subprocess.run(pg + [str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-w",
                         "-l", str(folder / "log"),
                         "-o", f"-h 127.0.0.1 -p {port} -k {folder}", "start"],
                   check=True, capture_output=True, cwd=folder)
    try:
        subprocess.run(pg + [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                             "-U", "postgres",
                             "course"], check=True, capture_output=True, cwd=folder)
        yield f"postgresql://postgres@127.0.0.1:{port}/course"
    finally:
        subprocess.run(pg + [str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-m", "fast",
                             "stop"],
                       capture_output=True, cwd=folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_postgresql_gradebook_holds_the_same_grades(tmp_path, postgres):
    root = copy_course(ROOT, tmp_path / "course")
    generate_release(root)
    for (student, assignment), nb in submissions(ROOT / "solutions", root,
                                                 tmp_path / "drafts").items():
        if assignment == "ex5_gradient_check":
            submit(root, student, assignment, nb)
    sqlite = nndebug(root, "--workers", "2")
    assert sqlite.returncode == 0, sqlite.stdout + sqlite.stderr
    pg = nndebug(root, "--workers", "2", "--force", "--db", postgres)
    assert pg.returncode == 0, pg.stdout + pg.stderr
    in_sqlite = gbk.scores(gbk.db_url(root, None))
    assert len(in_sqlite) == 4 and gbk.scores(gbk.db_url(root, postgres)) == in_sqlite
