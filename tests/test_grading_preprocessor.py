"""The clean room inside plain `nbgrader autograde` (`lesson.course.grading.preprocessor`): the
limits and deny list it passes on, the budget it chooses, a submission it cannot grade raised
(never saved as zeros), and the verdict it notes for the autograde hooks. The clean room and
the solution's measured time are replaced by stand-ins, so these run in a second; the graded
class runs it for real (tests/test_grading.py, slow)."""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from lesson.course.grading import budget, preprocessor, status
from lesson.course.grading.cleanroom import Verdicts
from lesson.course.grading.preprocessor import CleanRoomExecute, GradingFailed
from lesson.course.grading.sandbox import MemoryTooLow

INFO = {"student": "ada", "assignment": "a1", "notebook": "nb"}


@pytest.fixture()
def room(monkeypatch) -> dict:
    """The clean room replaced: what it was given, and the verdicts it returns (`verdicts`)."""
    seen: dict = {"verdicts": Verdicts(spent=1.5)}

    def grade(nb, limits, deny=()):
        seen.update(nb=nb, limits=limits, deny=list(deny))
        if isinstance(seen["verdicts"], BaseException):
            raise seen["verdicts"]
        return seen["verdicts"]

    monkeypatch.setattr(preprocessor, "grade_notebook", grade)
    return seen


@pytest.fixture()
def notes(monkeypatch) -> list:
    """The status hooks replaced: each note and failure, in order."""
    kept: list = []
    monkeypatch.setattr(status, "note", lambda *a: kept.append(("note", *a)))
    monkeypatch.setattr(status, "failed", lambda *a: kept.append(("failed", *a)))
    return kept


def _run(resources: dict, **traits) -> tuple:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    return CleanRoomExecute(**traits).preprocess(nb, {"nbgrader": resources})


def test_the_limits_and_the_deny_list_are_passed_on(room, notes):
    nb, res = _run(dict(INFO), timeout=7.0, memory_mb=1500, budget=40.0, deny=["/course"])
    limits = room["limits"]
    assert (limits.timeout_s, limits.memory_mb, limits.budget_s) == (7.0, 1500, 40.0)
    assert room["deny"] == [os.getcwd(), "/course"]       # the current folder first
    assert room["nb"] is nb
    assert res["nndebug"] == {"tampering": {}, "spent": 1.5, "budget": 40.0}
    assert notes == [("note", "ada", "a1", "nb", status.GRADED, "")]


def test_a_worker_away_from_the_course_folder_denies_only_what_it_is_given(room, notes):
    _run(dict(INFO), deny=["/course"], deny_cwd=False)
    assert room["deny"] == ["/course"]
    _run(dict(INFO), deny_cwd=False)
    assert room["deny"] == []


def test_without_a_gradebook_the_budget_is_the_option_or_none(room, notes):
    _run(dict(INFO))
    assert room["limits"].budget_s is None
    _run(dict(INFO), budget=12.0)
    assert room["limits"].budget_s == 12.0


def test_the_default_budget_is_read_from_the_solutions_time(room, notes, monkeypatch, tmp_path):
    asked: list = []

    def normal_time(url, assignment, notebook, solution, timeout_s, memory_mb, deny):
        asked.append((url, assignment, notebook, solution, timeout_s, memory_mb, deny))
        return 30.0

    monkeypatch.setattr(budget, "normal_time", normal_time)
    config = Config({"CourseDirectory": {"root": str(tmp_path), "source_directory": "src"}})
    _run(dict(INFO, db_url="sqlite:///gb.db"), timeout=5.0, memory_mb=900, config=config)
    assert room["limits"].budget_s == budget.budget_for(30.0, 5.0) == 120.0
    assert asked == [("sqlite:///gb.db", "a1", "nb", tmp_path / "src" / "a1" / "nb.ipynb", 5.0,
                      900, [os.getcwd()])]
    _run(dict(INFO, db_url="sqlite:///gb.db"), budget=9.0)   # an explicit budget wins
    assert room["limits"].budget_s == 9.0 and len(asked) == 1


def test_a_solution_that_cannot_be_measured_leaves_two_timeouts(room, notes, monkeypatch, caplog):
    def broken(*args):
        raise RuntimeError("the solution could not be run")

    monkeypatch.setattr(budget, "normal_time", broken)
    _run(dict(INFO, db_url="sqlite:///gb.db"), timeout=5.0)
    assert room["limits"].budget_s == 10.0
    assert "nb: the budget is two timeouts (the solution could not be run)" in caplog.text


def test_the_default_course_folder_is_the_current_one(room, notes, monkeypatch):
    got: list = []
    monkeypatch.setattr(budget, "normal_time", lambda url, a, n, solution, *rest:
                        got.append(solution) or None)
    _run(dict(INFO, db_url="sqlite:///gb.db"))
    assert got == [Path(".").resolve() / "source" / "a1" / "nb.ipynb"]


def test_a_notebook_the_clean_room_cannot_grade_fails_the_submission(room, notes):
    room["verdicts"] = Verdicts(error="the kernel died")
    with pytest.raises(GradingFailed, match="could not grade ada/a1/nb: the kernel died"):
        _run(dict(INFO))
    assert notes == [("failed", "ada", "a1", "nb",
                      "the clean room could not grade it: the kernel died")]


def test_a_memory_limit_too_low_fails_the_submission_and_says_why(room, notes):
    room["verdicts"] = MemoryTooLow(100, 400)
    with pytest.raises(GradingFailed, match=r"^ada/a1/nb: a memory limit of 100 MB"):
        _run(dict(INFO))
    assert notes[0][:4] == ("failed", "ada", "a1", "nb") and "100 MB" in notes[0][4]


def test_tampering_is_logged_and_noted_with_its_technique(room, notes, caplog):
    room["verdicts"] = Verdicts(tampering={"answer_1": ["line 3: reached into the grader",
                                                        "opened a file"]})
    _, res = _run(dict(INFO))
    assert notes == [("note", "ada", "a1", "nb", status.TAMPERING,
                      "reached into the grader")]
    assert ("TAMPERING ada/a1/nb, cell answer_1: line 3: reached into the grader; opened a file"
            in caplog.text)
    assert res["nndebug"]["tampering"] == {"answer_1": ["line 3: reached into the grader",
                                                        "opened a file"]}


def test_no_status_without_a_student_or_when_told_not_to(room, notes):
    _run({"assignment": "a1", "notebook": "nb"})
    _run(dict(INFO), note_status=False)
    assert notes == []
    room["verdicts"] = Verdicts(error="boom")
    with pytest.raises(GradingFailed, match=r"\?/a1/nb"):
        _run({"assignment": "a1", "notebook": "nb"})
    with pytest.raises(GradingFailed):
        _run(dict(INFO), note_status=False)
    assert notes == []


def test_earlier_nndebug_resources_are_kept(room, notes):
    nb = nbformat.v4.new_notebook()
    _, res = CleanRoomExecute().preprocess(nb, {"nbgrader": dict(INFO),
                                                "nndebug": {"kept": True}})
    assert res["nndebug"]["kept"] is True and res["nndebug"]["spent"] == 1.5


def test_the_instructors_nbgrader_config_sets_the_limits(room, notes, monkeypatch):
    """`c.CleanRoomExecute.timeout = ...` in nbgrader_config.py is how a course sets them; a
    budget of any positive size is the course's, not measured."""
    def measured(*args):
        raise AssertionError("an explicit budget needs no measurement")

    monkeypatch.setattr(budget, "normal_time", measured)
    config = Config({"CleanRoomExecute": {"timeout": 9.0, "memory_mb": 800, "budget": 0.5,
                                          "deny": ["/x"]}})
    _run(dict(INFO, db_url="sqlite:///gb.db"), config=config)
    limits = room["limits"]
    assert (limits.timeout_s, limits.memory_mb, limits.budget_s) == (9.0, 800, 0.5)
    assert room["deny"] == [os.getcwd(), "/x"]
