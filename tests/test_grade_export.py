"""The grades CSV (lesson.course.grading.export) from a gradebook made in the test: every
column of nbgrader's export, the status, the late penalty, the filters and the file name."""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from lesson.course.grading import export, status


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    """Two assignments, three students (one with a name and an email); "ann" handed in a1
    on time (2 of 3 points) and a2 late (3 of 3, a penalty of 1), "bob" a1 with a penalty
    larger than his score, "cy" nothing."""
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'gradebook.db'}"
    with pytest.MonkeyPatch.context() as mp:    # nbgrader runs the alembic beside python
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                           os.environ.get("PATH", "")]))
        _fill(url)
    return url


def _fill(url: str) -> None:
    with Gradebook(url) as gb:
        for name in ("a1", "a2"):
            gb.add_assignment(name, duedate="2030-01-01 00:00:00")
            gb.add_notebook("nb", name)
            gb.add_grade_cell("t", "nb", name, max_score=3, cell_type="code")
        gb.add_student("ann", first_name="Ann", last_name="Lee", email="ann@example.org")
        gb.add_student("bob")
        gb.add_student("cy")
        for student, assignment, when, score, penalty in [
                ("ann", "a1", "2029-12-31 00:00:00", 2.0, 0.0),
                ("ann", "a2", "2030-01-02 00:00:00", 3.0, 1.0),
                ("bob", "a1", "2030-01-03 00:00:00", 1.0, 2.0)]:
            gb.add_submission(assignment, student, timestamp=when)
            gb.find_grade("t", "nb", assignment, student).auto_score = score
            gb.find_submission_notebook("nb", assignment, student).late_submission_penalty = \
                penalty
        gb.db.commit()
    for student, assignment in [("ann", "a1"), ("ann", "a2"), ("bob", "a1")]:
        status.write(url, student, assignment, {"nb": (status.GRADED, "")})


def _rows(url: str, **kwargs) -> dict[tuple[str, str], dict]:
    with Gradebook(url) as gb:
        return {(r["student_id"], r["assignment"]): r for r in export.rows(gb, **kwargs)}


def test_every_row_carries_nbgraders_columns_and_a_status(url):
    rows = _rows(url)
    assert len(rows) == 6 and all(list(r) == export.COLUMNS or set(r) == set(export.COLUMNS)
                                  for r in rows.values())
    ann = rows[("ann", "a1")]
    assert (ann["first_name"], ann["last_name"], ann["email"]) == ("Ann", "Lee",
                                                                   "ann@example.org")
    assert str(ann["duedate"]).startswith("2030-01-01") and ann["timestamp"]
    assert (ann["raw_score"], ann["late_submission_penalty"], ann["score"]) == (2.0, 0.0, 2.0)
    assert ann["status"] == "graded" and ann["max_score"] == 3.0


def test_a_late_penalty_is_taken_off_and_never_below_zero(url):
    rows = _rows(url)
    late = rows[("ann", "a2")]
    assert (late["raw_score"], late["late_submission_penalty"], late["score"]) == (3.0, 1.0, 2.0)
    assert rows[("bob", "a1")]["score"] == 0.0                # 1 point, a penalty of 2
    assert rows[("bob", "a1")]["first_name"] == "" and rows[("bob", "a1")]["email"] == ""


def test_work_never_handed_in_is_nbgraders_zero(url):
    missing = _rows(url)[("cy", "a2")]
    assert missing["status"] == export.NOT_SUBMITTED and missing["timestamp"] == ""
    assert (missing["raw_score"], missing["late_submission_penalty"], missing["score"]) == \
        (0.0, 0.0, 0.0)


def test_rows_of_some_students_and_some_assignments(url):
    assert set(_rows(url, students=["bob"])) == {("bob", "a1"), ("bob", "a2")}
    assert set(_rows(url, students=["ann"])) == {("ann", "a1"), ("ann", "a2")}
    assert set(_rows(url, students=["cy"])) == {("cy", "a1"), ("cy", "a2")}
    assert set(_rows(url, assignments=["a2"])) == {("ann", "a2"), ("bob", "a2"), ("cy", "a2")}
    assert set(_rows(url, students=["bob"], assignments=["a2"])) == {("bob", "a2")}


def test_nbgrader_exports_to_grades_csv_by_default(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plugin = export.StatusCsvExport()
    with Gradebook(url) as gb:
        plugin.export(gb)
    written = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert len(written) == 6 and list(written[0]) == export.COLUMNS


# -- the status table: folding, the fallback, fingerprints, and plain autograde's hooks --------

def test_a_submissions_notebooks_fold_ungraded_first_then_tampering():
    assert status.fold([("graded", "", "f1"), ("ungraded", "no", "f1"),
                        ("tampering", "os.kill", "f1"), ("ungraded", "no", "f1")]) == \
        ("ungraded", "no", "f1")
    assert status.fold([("graded", "", "f"), ("tampering", "a", "f"), ("tampering", "b", "f")]) \
        == ("tampering", "a; b", "f")
    assert status.fold([("graded", "", "f")]) == ("graded", "", "f")
    assert status.fold([]) == ("graded", "", "")


def test_labels_and_what_counts_as_graded():
    assert status.State("graded", late=True).label == "late"
    assert status.State("tampering", "reads files").label == "tampering: reads files"
    assert status.State("tampering").graded and not status.State("ungraded", "x").graded


def test_submissions_the_table_does_not_describe_are_judged_by_their_scores(url, tmp_path):
    """"ann"'s a1 has a status row; without the rows, a score means graded, none ungraded."""
    import shutil

    copy = tmp_path / "gradebook.db"                  # the shared gradebook stays as it is
    shutil.copy(url.removeprefix("sqlite:///"), copy)
    with Gradebook(f"sqlite:///{copy}") as gb:
        gb.add_student("dee")
        gb.add_submission("a2", "dee", timestamp="2029-01-01 00:00:00")
        gb.add_student("fay")                           # autograded before the table existed
        gb.add_submission("a2", "fay", timestamp="2029-01-01 00:00:00")
        gb.find_grade("t", "nb", "a2", "fay").auto_score = 1.0
        gb.db.commit()
        states = status.states(gb)
    assert states[("dee", "a2")] == status.State("ungraded", "never autograded")
    assert states[("fay", "a2")] == status.State("graded")
    assert states[("ann", "a2")].label == "late" and states[("ann", "a1")].label == "graded"


def test_a_fingerprint_changes_with_a_files_name_or_content(tmp_path):
    (tmp_path / "a.ipynb").write_text("one")
    first = status.fingerprint(tmp_path)
    (tmp_path / "a.ipynb").write_text("two")
    second = status.fingerprint(tmp_path)
    (tmp_path / "a.ipynb").rename(tmp_path / "b.ipynb")
    assert len({first, second, status.fingerprint(tmp_path)}) == 3


def test_the_technique_is_the_first_reason_without_its_line():
    assert status.technique(["line 12: uses os.kill", "line 3: other"]) == "uses os.kill"
    assert status.technique([]) == "reached into the grader"
    assert len(status.technique(["x" * 300])) == 120


def test_plain_autogrades_hooks_write_a_submissions_status(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a1")
        gb.add_notebook("good", "a1")
        gb.add_notebook("bad", "a1")
        gb.add_student("eve")
        gb.add_submission("a1", "eve")
    folder = tmp_path / "submitted" / "eve" / "a1"
    folder.mkdir(parents=True)
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), folder / "good.ipynb")
    (folder / "bad.ipynb").write_text("{not json")
    paths = [str(folder / "good.ipynb"), str(folder / "bad.ipynb")]
    monkeypatch.setattr(status, "_autograde_url", lambda: url)

    status.autograde_started("*", "*", paths)            # the command line's patterns
    started = status.read(url)[("eve", "a1")]
    assert started.kind == "ungraded" and "bad.ipynb is not a readable notebook" in started.detail
    assert capsys.readouterr().out.startswith("eve/a1: ungraded: bad.ipynb is not a readable")

    status.note("eve", "a1", "bad", "tampering", "uses os.kill")
    status.autograde_finished("*", "*", paths)
    finished = status.read(url)[("eve", "a1")]
    assert finished == status.State("tampering", "uses os.kill", status.fingerprint(folder))
    assert capsys.readouterr().out.startswith("eve/a1: 0/0 tampering: uses os.kill (")

    status.failed("eve", "a1", "good", "the kernel died\nmore")
    assert status.read(url)[("eve", "a1")] == status.State("ungraded", "the kernel died\nmore",
                                                           status.fingerprint(folder))
    assert capsys.readouterr().out == "eve/a1: ungraded: the kernel died\n"
    assert _notebook_rows(url) == {"good": ("ungraded", "the kernel died\nmore"),
                                   "bad": ("tampering", "uses os.kill")}   # the other kept

    status.failed("eve", "a1", "good", "x" * 600)                 # a reason is cut at 500
    assert len(_notebook_rows(url)["good"][1]) == 500
    status.write(url, "eve", "a1", {"bad": ("ungraded", "y" * 600)})
    assert {k: len(v[1]) for k, v in _notebook_rows(url).items()} == {"bad": 500}


def _notebook_rows(url: str) -> dict[str, tuple[str, str]]:
    with Gradebook(url) as gb:
        engine, table = status._engine_and_table(gb)
        with engine.connect() as conn:
            return {r.notebook: (r.status, r.detail) for r in conn.execute(table.select())}


def test_without_a_running_autograde_the_hooks_do_nothing(tmp_path, capsys):
    status.autograde_started("a1", "eve", [str(tmp_path / "x.ipynb")])
    status.autograde_finished("a1", "eve", [])
    status.failed("eve", "a1", "nb", "why")
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []
