"""What `nndebug grade` writes into nbgrader's gradebook (`lesson.course.grading.gradebook`), on
gradebooks made in the test: the database URL, the assignments copied to another database,
students and submissions, a graded submission's scores (a notebook not handed in scores 0),
the scores as export reads them, and the autograded notebooks feedback is made from."""
from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from traitlets.config import Config

from lesson.course.grading import gradebook, status


def _alembic_on_path(mp: pytest.MonkeyPatch) -> None:
    """nbgrader runs the alembic beside python when it makes a gradebook."""
    mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                       os.environ.get("PATH", "")]))


def _course(url: str) -> None:
    """Assignment "a1": notebooks "one" (a graded test "t1" of 3 points, a solution cell, a
    task of 2 points) and "two" (a test "t2" of 1 point)."""
    with Gradebook(url) as gb:
        gb.add_assignment("a1", duedate="2030-01-01 00:00:00")
        gb.add_notebook("one", "a1")
        gb.add_notebook("two", "a1")
        gb.add_grade_cell("t1", "one", "a1", max_score=3, cell_type="code")
        gb.add_source_cell("t1", "one", "a1", cell_type="code", locked=True,
                           source="assert answer == 42", checksum="abc")
        gb.add_solution_cell("s1", "one", "a1")
        gb.add_task_cell("task", "one", "a1", max_score=2, cell_type="markdown")
        gb.add_grade_cell("t2", "two", "a1", max_score=1, cell_type="code")


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> tuple[Path, Path]:
    """The course's gradebook, made once (nbgrader's migrations take seconds), and an empty one."""
    folder = tmp_path_factory.mktemp("gradebooks")
    with pytest.MonkeyPatch.context() as mp:
        _alembic_on_path(mp)
        _course(f"sqlite:///{folder / 'course.db'}")
        Gradebook(f"sqlite:///{folder / 'empty.db'}").close()
    return folder / "course.db", folder / "empty.db"


@pytest.fixture
def url(course, tmp_path) -> str:
    """A fresh copy of the course's gradebook for one test."""
    shutil.copy(course[0], tmp_path / "gradebook.db")
    return f"sqlite:///{tmp_path / 'gradebook.db'}"


def test_the_database_url(tmp_path):
    assert gradebook.db_url(tmp_path, None) == f"sqlite:///{(tmp_path / 'gradebook.db').resolve()}"
    assert gradebook.db_url(tmp_path, "sqlite:////x/g.db") == "sqlite:////x/g.db"
    assert gradebook.db_url(tmp_path, "postgresql://u@h:5/db") == "postgresql+psycopg://u@h:5/db"
    assert gradebook.db_url(tmp_path, "postgresql+psycopg://h/d") == "postgresql+psycopg://h/d"
    assert gradebook.db_url(tmp_path, "postgresql://h/d?x=postgresql://") == \
        "postgresql+psycopg://h/d?x=postgresql://"            # the scheme only
    for bad in ("mysql://h/d", "gradebook.db", "sqlite://relative"):
        with pytest.raises(ValueError, match="--db must be"):
            gradebook.db_url(tmp_path, bad)
    assert gradebook.is_postgres("postgresql+psycopg://h/d")
    assert not gradebook.is_postgres("sqlite:///g.db")


def test_the_assignments_are_copied_to_another_database_once(url, course, tmp_path):
    shutil.copy(course[1], tmp_path / "other.db")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    for _ in range(2):                                   # a second copy changes nothing
        gradebook.ensure_assignments(other, url)
    with Gradebook(other) as gb:
        (a,) = gb.assignments
        assert a.name == "a1" and str(a.duedate).startswith("2030-01-01")
        one = gb.find_notebook("one", "a1")
        assert [(c.name, c.max_score, c.cell_type) for c in one.grade_cells] == \
            [("t1", 3, "code")]
        (source,) = one.source_cells
        assert (source.name, source.locked, source.source, source.checksum) == \
            ("t1", True, "assert answer == 42", "abc")
        assert [c.name for c in one.solution_cells] == ["s1"]
        assert [(c.name, c.max_score) for c in one.task_cells] == [("task", 2)]
        assert sorted(nb.name for nb in a.notebooks) == ["one", "two"]
    assert gradebook.notebooks_of(other, "a1") == gradebook.notebooks_of(url, "a1")
    with Gradebook(url) as gb:                           # a new assignment in the course
        gb.add_assignment("a2")
        gb.add_notebook("three", "a2")
    # a1 first (nbgrader's own order is its ids'): a1 is there already, a2 still comes
    from nbgrader.api import Assignment
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Gradebook, "assignments", property(
            lambda gb: sorted(gb.db.query(Assignment).all(), key=lambda a: a.name)))
        gradebook.ensure_assignments(other, url)
    assert gradebook.notebooks_of(other, "a2") == ["three"]


def test_the_same_database_is_left_alone(url):
    def opened(*args, **kwargs):
        raise AssertionError("a gradebook was opened to copy onto itself")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("nbgrader.api.Gradebook", opened)
        gradebook.ensure_assignments(url, url)
    assert sorted(gradebook.notebooks_of(url, "a1")) == ["one", "two"]


def test_students_and_submissions_are_made_with_their_timestamps(url, tmp_path):
    subs = [gradebook.Submission("ann", "a1", tmp_path / "ann"),
            gradebook.Submission("bob", "a1", tmp_path / "bob")]
    assert subs[0].key == ("ann", "a1")
    assert len({subs[0], gradebook.Submission("ann", "a1", tmp_path / "ann")}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        subs[0].student = "bob"                          # a key of the engine's tables
    gradebook.prepare(url, subs, {("ann", "a1"): "2030-01-02 10:00:00"})
    gradebook.prepare(url, subs, {("ann", "a1"): "2030-01-02 10:00:00"})   # again: the same
    with Gradebook(url) as gb:
        assert sorted(s.id for s in gb.students) == ["ann", "bob"]
        assert str(gb.find_submission("a1", "ann").timestamp).startswith("2030-01-02 10:00")
        assert gb.find_submission("a1", "bob").timestamp is None
        assert len(gb.find_assignment("a1").submissions) == 2


def _graded(failing: bool) -> dict:
    """Notebook "one" as autograde leaves it: test t1 run, with an error when `failing`."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("assert answer == 42")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "t1", "points": 3, "locked": True,
                                 "solution": False, "schema_version": 3}
    if failing:
        cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="",
                                               traceback=[])]
    nb.cells.append(cell)
    return nbformat.from_dict(nb)


def _record(url: str, student: str, graded: dict, when: str | None = None) -> None:
    gradebook.prepare(url, [gradebook.Submission(student, "a1", Path("."))],
                      {(student, "a1"): when} if when else {})
    states = {name: (status.GRADED, "") for name in graded}
    gradebook.record(url, student, "a1", graded, Config(), states, "fp", 1.5)


def test_a_graded_submission_scores_its_tests_and_a_notebook_not_handed_in_scores_zero(url):
    _record(url, "ann", {"one": _graded(failing=False)})
    _record(url, "bob", {"one": _graded(failing=True)})
    cells = gradebook.cell_scores(url, "ann", "a1")
    assert cells["t1"] == (3.0, 3.0) and cells["t2"] == (0.0, 1.0)     # "two" not handed in
    assert gradebook.cell_scores(url, "bob", "a1")["t1"] == (0.0, 3.0)
    with Gradebook(url) as gb:
        missing = gb.find_grade("t2", "two", "a1", "ann")
        assert missing.auto_score == 0 and not missing.needs_manual_grade
        assert gb.find_grade("t1", "one", "a1", "ann").auto_score == 3
    scores = gradebook.scores(url)
    assert scores[("ann", "a1")] == (3.0, 6.0) and scores[("bob", "a1")] == (0.0, 6.0)


def test_a_submission_that_could_not_be_graded_has_no_score(url):
    gradebook.prepare(url, [gradebook.Submission("cy", "a1", Path("."))], {})
    status.write(url, "cy", "a1", {"one": (status.UNGRADED, "the kernel died")})
    assert gradebook.scores(url)[("cy", "a1")] == (None, 6.0)


def test_the_status_of_a_graded_submission_is_written(url):
    _record(url, "ann", {"one": _graded(failing=False)})
    with Gradebook(url) as gb:
        state = status.states(gb)[("ann", "a1")]
    assert state.graded


def test_autograded_notebooks_are_written_over_read_only_ones(tmp_path):
    folder = tmp_path / "autograded" / "ann" / "a1"
    gradebook.write_autograded(folder, {"one": _graded(failing=False)})
    target = folder / "one.ipynb"
    assert nbformat.read(target, as_version=4).cells[0].source == "assert answer == 42"
    os.chmod(target, 0o444)                              # nbgrader leaves them read-only
    gradebook.write_autograded(folder, {"one": _graded(failing=True)})
    assert nbformat.read(target, as_version=4).cells[0].outputs[0]["output_type"] == "error"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644


def test_an_ungraded_submissions_old_autograded_notebooks_go(tmp_path):
    folder = tmp_path / "autograded" / "ann" / "a1"
    gradebook.write_autograded(folder, {"one": _graded(failing=False)})
    gradebook.forget_autograded(folder)
    assert not folder.exists() and folder.parent.exists()
    gradebook.forget_autograded(folder)                  # nothing there: nothing to do


def test_forgetting_never_fails_the_grading(tmp_path, monkeypatch):
    folder = tmp_path / "autograded" / "ann" / "a1"
    gradebook.write_autograded(folder, {"one": _graded(failing=False)})

    def refused(*args, **kwargs):
        raise PermissionError("a file that would not go")

    monkeypatch.setattr(os, "unlink", refused)
    gradebook.forget_autograded(folder)                  # what cannot go stays, silently
