"""`nndebug grade`'s own decisions (`lesson.course.grading.engine`), on inputs made in the test:
the class table (a score never shown for an ungraded submission), the few words of a reason,
which error outputs the instructor is told about, which submissions are found, a database URL
printed without its password, the clean room's options read from the course config. The
grading itself (Dask, the gradebook, the clean room) is tests/test_grading.py's and
test_grading_cluster.py's (slow)."""
from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import Config

from lesson.course.grading import engine, status
from lesson.course.grading.engine import Outcome, Report, table
from lesson.course.grading.status import State


def test_an_outcome_is_graded_unless_ungraded_and_tampering_only_when_caught():
    assert Outcome("a", "x", status.GRADED).graded
    assert Outcome("a", "x", status.TAMPERING).graded
    assert not Outcome("a", "x", status.UNGRADED).graded
    assert Outcome("a", "x", status.TAMPERING).tampering
    assert not Outcome("a", "x", status.GRADED).tampering
    report = Report(outcomes=[Outcome("a", "x", status.GRADED),
                              Outcome("b", "x", status.UNGRADED, reason="r")])
    assert [o.student for o in report.ungraded] == ["b"]


@pytest.mark.parametrize("reason,words", [
    ("one.ipynb is not a readable notebook (JSONDecodeError)", "not a notebook"),
    ("a memory limit of 100 MB is below what the course needs", "memory limit"),
    ("the task failed on worker 2", "task failed"),
    ("the clean room could not grade it: boom", "grader failed"),
    ("unknown assignment a9", "unknown"),
    ("something else", "not graded"),
    ("", "not graded"),
])
def test_a_reason_gets_its_few_words(reason, words):
    assert engine._short(reason) == words


def test_the_table_shows_scores_marks_and_why_a_submission_is_not_graded():
    report = Report(
        outcomes=[Outcome("bob", "a1", status.UNGRADED, reason="the clean room could not "
                                                               "grade it"),
                  Outcome("ann", "a1", status.GRADED)],
        scores={("ann", "a1"): (3, 4), ("bob", "a1"): (0, 4), ("cy", "a1"): (2.5, 4),
                ("cy", "a2"): (1, 1), ("dee", "a2"): (None, 1), ("ann", "a2"): (1, 1)},
        states={("cy", "a1"): State(status.TAMPERING, "edited a test"),
                ("cy", "a2"): State(status.GRADED, late=True),
                ("ann", "a2"): State(status.UNGRADED, "one.ipynb is not a readable notebook"),
                ("eve", "a1"): State(status.TAMPERING, late=True)})
    assert table(report).splitlines() == [
        "student  a1               a2",
        "ann      3/4              x not a notebook",    # the state says ungraded: no score
        "bob      x grader failed  -",                   # this run failed it: its 0 not shown
        "cy       2.5/4!           1/1 late",
        "dee      -                -",                   # no score yet
        "eve      -                -",
    ]


def test_a_run_that_grades_a_submission_again_overrides_its_old_state():
    report = Report(outcomes=[Outcome("ann", "a1", status.GRADED)],
                    scores={("ann", "a1"): (2, 2)},
                    states={("ann", "a1"): State(status.GRADED)})
    assert table(report).splitlines()[1] == "ann      2/2"
    failed = Report(outcomes=[Outcome("ann", "a1", status.UNGRADED, reason="the task failed")],
                    scores={("ann", "a1"): (2, 2)}, states={("ann", "a1"): State(status.GRADED)})
    assert table(failed).splitlines()[1] == "ann      x task failed"


def test_long_names_widen_their_column():
    report = Report(scores={("a_student_with_a_long_name", "a1"): (1, 2)})
    assert table(report).splitlines() == ["student                     a1",
                                          "a_student_with_a_long_name  1/2"]
    assert table(Report()) == "student"


@pytest.mark.parametrize("out,line", [
    ({"output_type": "error", "ename": "SyntaxError", "evalue": "line 2 of answer cell a: x"},
     "SyntaxError at line 2 of answer cell a: x"),
    ({"output_type": "error", "ename": "IndentationError", "evalue": "v"}, "IndentationError at v"),
    ({"output_type": "error", "ename": "TabError", "evalue": "v"}, "TabError at v"),
    ({"output_type": "error", "ename": "TimeoutError", "evalue": "ran past 30 s"}, "ran past 30 s"),
    ({"output_type": "error", "ename": "GraderError", "evalue": "not run"}, "not run"),
    ({"output_type": "error", "ename": "MemoryError", "evalue": "over 3 GB"}, "over 3 GB"),
    ({"output_type": "error", "ename": "RuntimeError", "evalue": "the sandbox died"},
     "the sandbox died"),
    ({"output_type": "error", "ename": "RuntimeError", "evalue": "a student's own error"}, None),
    ({"output_type": "error", "ename": "AssertionError", "evalue": "wrong"}, None),
    ({"output_type": "stream", "ename": "TimeoutError", "evalue": "x"}, None),
    ({"output_type": "error", "ename": "TimeoutError", "evalue": "x" * 300}, "x" * 200),
])
def test_only_limits_dead_sandboxes_and_unparsable_answers_reach_the_report(out, line):
    assert engine._reportable(out) == line


def test_submissions_are_found_per_student_and_assignment_in_order(tmp_path):
    assert engine.discover(tmp_path, []) == []               # no submitted/ folder yet
    for student, assignment in (("bob", "a1"), ("ann", "a2"), ("ann", "a1")):
        (tmp_path / "submitted" / student / assignment).mkdir(parents=True)
    (tmp_path / "submitted" / "notes.txt").write_text("not a student")
    (tmp_path / "submitted" / "bob" / "readme.txt").write_text("not an assignment")
    found = [(s.student, s.assignment, s.folder) for s in engine.discover(tmp_path, [])]
    assert found == [("ann", "a1", tmp_path / "submitted/ann/a1"),
                     ("ann", "a2", tmp_path / "submitted/ann/a2"),
                     ("bob", "a1", tmp_path / "submitted/bob/a1")]
    assert [(s.student, s.assignment) for s in engine.discover(tmp_path, ["a1"])] == [
        ("ann", "a1"), ("bob", "a1")]


def test_a_database_url_is_printed_without_its_password():
    assert engine._safe("postgresql://ta:s3cret@db:5432/course") == \
        "postgresql://ta:***@db:5432/course"
    assert engine._safe("postgresql+psycopg2://ta:p@ss@db/c") == "postgresql+psycopg2://ta:***@db/c"
    assert engine._safe("postgresql://ta:a/b:c@db/c") == "postgresql://ta:***@db/c"
    assert engine._safe("sqlite:////srv/gradebook.db") == "sqlite:////srv/gradebook.db"
    assert engine._safe("postgresql://ta@db/course") == "postgresql://ta@db/course"


def test_a_gradebook_that_cannot_be_opened_is_infrastructure_and_hides_the_password(tmp_path):
    url = f"sqlite:///{tmp_path}/missing/folder/gradebook.db"
    with pytest.raises(engine.Infrastructure) as caught:
        engine.open_gradebook(url)
    # the driver's own words, not SQLAlchemy's wrapping of them
    assert str(caught.value) == f"cannot open the gradebook {url}: unable to open database file"
    assert "start the database server" in caught.value.advice


def test_the_clean_rooms_options_come_from_the_course_config():
    config = Config({"CleanRoomExecute": {"timeout": 12.0}})
    assert engine._cfg(config, "timeout", 30.0) == 12.0
    assert engine._cfg(config, "memory_mb", 3072) == 3072
    assert engine._cfg(Config(), "timeout", 30.0) == 30.0
    assert engine._cfg({"CleanRoomExecute": "not a section"}, "timeout", 30.0) == 30.0


def test_a_course_configs_file_is_read_as_nbgrader_reads_it(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n"
                                                 "c.CleanRoomExecute.timeout = 7.5\n")
    assert engine._cfg(engine.load_config(tmp_path), "timeout", 30.0) == 7.5


def test_a_submissions_notebooks_are_read_or_none(tmp_path):
    from lesson.course.grading.gradebook import Submission

    (tmp_path / "one.ipynb").write_bytes(b'{"cells": []}\xff')
    got = engine._read_notebooks(Submission("ann", "a1", tmp_path), ["one", "two"])
    assert got == {"one": '{"cells": []}\ufffd', "two": None}


def test_a_submission_without_a_timestamp_has_none(tmp_path):
    assert engine._timestamp(tmp_path) is None
    (tmp_path / "timestamp.txt").write_text("2030-01-02 03:04:05.000000 UTC")
    stamp = engine._timestamp(tmp_path)
    assert (stamp.year, stamp.month, stamp.day, stamp.hour) == (2030, 1, 2, 3)


def test_the_dotted_name_of_a_preprocessor_is_imported():
    from lesson.course.grading.preprocessor import CleanRoomExecute

    assert engine._import("lesson.course.grading.preprocessor.CleanRoomExecute") \
        is CleanRoomExecute
    assert engine._import("pathlib.Path") is Path
