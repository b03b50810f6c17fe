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
    assert set(_rows(url, assignments=["a2"])) == {("ann", "a2"), ("bob", "a2"), ("cy", "a2")}
    assert set(_rows(url, students=["bob"], assignments=["a2"])) == {("bob", "a2")}


def test_nbgrader_exports_to_grades_csv_by_default(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plugin = export.StatusCsvExport()
    with Gradebook(url) as gb:
        plugin.export(gb)
    written = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert len(written) == 6 and list(written[0]) == export.COLUMNS
