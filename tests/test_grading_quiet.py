"""nbgrader's false alarms silenced where they are raised, and nothing else
(`lesson.course.grading.quiet`), and the kill of a grading child's session
(`lesson.course.grading.processes`), on a gradebook and processes made in the test."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import nbformat
import pytest
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import OverwriteCells as NbgraderOverwriteCells
from sqlalchemy import exc

from lesson.course.grading.processes import kill_session
from lesson.course.grading.quiet import OverwriteCells, quiet_sqlalchemy

RELEASED = "assert answer == 42"
HIDDEN = RELEASED + "\n### BEGIN HIDDEN TESTS\nassert answer != 41\n### END HIDDEN TESTS"


def _test_cell(source: str, locked: bool = True, points: float = 3) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": locked,
                                 "grade_id": "t1", "points": points, "schema_version": 3}
    return cell


@pytest.fixture()
def url(tmp_path, alembic_on_path) -> str:
    """A gradebook whose test cell "t1" (3 points, locked) holds hidden tests."""
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    source = _test_cell(HIDDEN)
    with Gradebook(url) as gb:
        gb.add_assignment("a1")
        gb.add_notebook("nb", "a1")
        gb.add_grade_cell("t1", "nb", "a1", max_score=3, cell_type="code")
        gb.add_source_cell("t1", "nb", "a1", cell_type="code", locked=True, source=HIDDEN,
                           checksum=utils.compute_checksum(source))
    return url


def _reports(url: str, cell: nbformat.NotebookNode, monkeypatch) -> list[tuple]:
    """What OverwriteCells reports about `cell`, submitted as the notebook's only cell."""
    reported: list[tuple] = []
    monkeypatch.setattr(NbgraderOverwriteCells, "report_change",
                        lambda self, name, attr, old, new: reported.append((name, attr)))
    nb = nbformat.v4.new_notebook(cells=[cell])
    OverwriteCells().preprocess(nb, {"nbgrader": {"notebook": "nb", "assignment": "a1",
                                                  "db_url": url}})
    return reported


def test_the_untouched_released_test_cell_raises_no_checksum_alarm(url, monkeypatch):
    assert _reports(url, _test_cell(RELEASED), monkeypatch) == []
    assert _reports(url, _test_cell(RELEASED + "\n\n"), monkeypatch) == []   # spacing only


def test_an_edited_test_cell_or_changed_points_are_still_reported(url, monkeypatch):
    assert _reports(url, _test_cell("assert True"), monkeypatch) == [("t1", "checksum")]
    assert _reports(url, _test_cell(HIDDEN + "\n# mine"), monkeypatch) == [("t1", "checksum")]
    assert _reports(url, _test_cell(RELEASED, points=30), monkeypatch) == [("t1", "points")]


def test_a_cell_the_gradebook_does_not_hold_or_with_broken_hidden_marks_is_not_released(
        url, monkeypatch):
    stranger = _test_cell(RELEASED)
    stranger.metadata["nbgrader"]["grade_id"] = "t9"
    assert _reports(url, stranger, monkeypatch) == []      # nbgrader drops its id, no checksum
    with Gradebook(url) as gb:
        cell = gb.find_source_cell("t1", "nb", "a1")
        cell.source = "### BEGIN HIDDEN TESTS\n### BEGIN HIDDEN TESTS\n"   # nested: refused
        cell.checksum = utils.compute_checksum(_test_cell(cell.source))
        gb.db.commit()
    assert _reports(url, _test_cell(""), monkeypatch) == [("t1", "checksum")]


def _warned(category: type, module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_sqlalchemy()
        warnings.warn_explicit("deprecated", category, "gradebook.py", 1, module=module)
    return bool(caught)


@pytest.mark.parametrize("category", [exc.SADeprecationWarning, exc.SAWarning,
                                      getattr(exc, "MovedIn20Warning", exc.SADeprecationWarning)])
def test_sqlalchemys_warnings_are_silenced_from_nbgrader_only(category):
    assert not _warned(category, "nbgrader.api")
    assert not _warned(category, "nbgrader")
    assert _warned(category, "nbgrader_plugin")            # another package that starts alike
    assert _warned(category, "lesson.course.grading.gradebook")


def test_other_warnings_from_nbgrader_still_show():
    assert _warned(UserWarning, "nbgrader.api")
    assert _warned(DeprecationWarning, "nbgrader.api")


def _gone(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == -9


def test_a_session_leader_is_killed_with_its_group():
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time;"
                               "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True);"
                               "time.sleep(60)"], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    grandchild = int(leader.stdout.readline())
    kill_session(leader.pid)
    assert _gone(leader)
    for _ in range(100):                                   # the group's sleep is gone too
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the session's other process survived")


def test_a_child_without_a_session_of_its_own_is_still_killed():
    child = subprocess.Popen(["sleep", "60"])              # in the test's own group
    kill_session(child.pid)
    assert _gone(child)
    kill_session(child.pid)                                # already gone and reaped: no error
