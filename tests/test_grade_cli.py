"""`nndebug grade`'s command line (`lesson.course.grading.cli`) with the class's grading faked:
options refused on their own, each failure mapped to its exit status and one line that says
what to do, and what a run prints (outcomes, skipped work, tampering, the export, feedback).
The grading itself is judged in tests/test_grading.py."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lesson.course.grading import cli, engine, export, feedback, status


def _args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser, "grade")
    return parser.parse_args([*argv, "--root", str(tmp_path), "--no-progress"])


@pytest.fixture
def course(tmp_path) -> Path:
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    return tmp_path


def _fake(monkeypatch, report=None, raises: BaseException | None = None) -> dict:
    seen: dict = {}

    def grade_class(root, assignments, **kwargs):
        seen.update(kwargs, root=root, assignments=assignments)
        if raises is not None:
            raise raises
        return report or engine.Report()

    monkeypatch.setattr(engine, "grade_class", grade_class)
    return seen


def test_the_exit_statuses_are_the_documented_ones():
    assert (cli.EXIT_OK, cli.EXIT_UNGRADED, cli.EXIT_USAGE, cli.EXIT_INFRASTRUCTURE) == \
        (0, 1, 2, 3)
    for line in ("0 every submission", "1 some could not be", "2 a usage error",
                 "3 the infrastructure failed"):
        assert line in cli.__doc__


@pytest.mark.parametrize("argv, message", [
    (("--workers", "0"), "--workers must be at least 1"),
    (("--workers", "2", "--scheduler", "tcp://h:1"), "not both"),
    (("--timeout", "0"), "--timeout must be positive"),
    (("--memory", "-5"), "--memory must be positive"),
    (("--budget", "0"), "--budget must be positive"),
    (("--export", "/no/such/folder/grades.csv"), "--export"),
])
def test_options_refused_on_their_own(course, capsys, monkeypatch, argv, message):
    seen = _fake(monkeypatch)
    assert cli.run(_args(course, *argv)) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err and not seen       # nothing was graded


def test_options_at_their_edges_are_taken(course, monkeypatch):
    seen = _fake(monkeypatch)
    args = _args(course, "a1", "--workers", "1", "--timeout", "0.5", "--memory", "1",
                 "--budget", "0.1", "--student", "ann", "--student", "bob", "--force",
                 "--export", str(course / "g.csv"))
    monkeypatch.setattr(export, "export_csv", lambda url, path: 0)
    assert cli.run(args) == cli.EXIT_OK
    assert seen["assignments"] == ["a1"] and seen["workers"] == 1 and seen["students"] == \
        ["ann", "bob"] and seen["force"] and seen["memory_mb"] == 1 and not seen["progress"]
    assert seen["connect_timeout"] == 30.0 and seen["scheduler"] is None
    assert cli.run(_args(course, "--scheduler", "tcp://h:1")) == cli.EXIT_OK


def test_outside_a_course_folder_says_where_to_run_it(tmp_path, capsys, monkeypatch):
    _fake(monkeypatch)
    assert cli.run(_args(tmp_path)) == cli.EXIT_INFRASTRUCTURE
    err = capsys.readouterr().err
    assert "no nbgrader_config.py" in err and "What to do" in err and "--debug" in err


@pytest.mark.parametrize("error, code, words", [
    (engine.Usage("no assignment a9"), cli.EXIT_USAGE, "no assignment a9"),
    (engine.Infrastructure("the scheduler is gone", "start it"), cli.EXIT_INFRASTRUCTURE,
     "the scheduler is gone. What to do: start it"),
    (KeyboardInterrupt(), 130, "interrupted; what was graded is kept"),
    (RuntimeError("boom"), cli.EXIT_INFRASTRUCTURE, "failed: RuntimeError: boom"),
])
def test_each_failure_has_its_exit_status_and_its_line(course, capsys, monkeypatch, error,
                                                       code, words):
    _fake(monkeypatch, raises=error)
    assert cli.run(_args(course)) == code
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_database_failure_names_the_gradebook(course, capsys, monkeypatch):
    from sqlalchemy.exc import OperationalError

    _fake(monkeypatch, raises=OperationalError("SELECT 1", {}, Exception("connection refused\n"
                                                                          "more")))
    assert cli.run(_args(course)) == cli.EXIT_INFRASTRUCTURE
    err = capsys.readouterr().err
    assert "the gradebook failed: connection refused" in err and "more" not in err
    assert "database server" in err


def test_debug_shows_the_traceback(course, capsys, monkeypatch):
    _fake(monkeypatch, raises=RuntimeError("boom"))
    assert cli.run(_args(course, "--debug")) == cli.EXIT_INFRASTRUCTURE
    err = capsys.readouterr().err
    assert "Traceback" in err and "--debug shows" not in err


def _report() -> engine.Report:
    return engine.Report(
        outcomes=[engine.Outcome("bob", "a1", status.UNGRADED, reason="the kernel died " * 10),
                  engine.Outcome("ann", "a1", status.GRADED, lines=["3 of 3 tests"]),
                  engine.Outcome("cy", "a1", status.TAMPERING, lines=["edited a test"])],
        skipped=[("dee", "a1")], scores={("ann", "a1"): (3.0, 3.0), ("cy", "a1"): (1.0, 3.0)},
        notes=["budget: 20 s a notebook"], seconds=12.4)


def test_a_run_prints_what_happened_and_fails_on_ungraded_work(course, capsys, monkeypatch):
    _fake(monkeypatch, report=_report())
    assert cli.run(_args(course)) == cli.EXIT_UNGRADED
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "budget: 20 s a notebook"
    assert lines[1:3] == ["ann/a1: 3 of 3 tests", "cy/a1: edited a test"]    # by student
    assert "1 unchanged submissions skipped" in out
    assert "tampering caught (0 on the tests it touched): cy/a1" in out
    assert "2 graded, 1 could not be graded, in 12 s" in out
    assert "1 submissions could not be graded: bob/a1 (the kernel died" in err
    assert len(err.split("(the kernel died")[1].split(")")[0]) < 80   # the reason cut to 80


def test_export_and_feedback_follow_the_grading(course, capsys, monkeypatch):
    report = _report()
    report.outcomes = report.outcomes[1:]                     # everyone graded
    _fake(monkeypatch, report=report)
    written = {}
    monkeypatch.setattr(export, "export_csv", lambda url, path: written.update(url=url) or 4)
    monkeypatch.setattr(feedback, "generate_feedback",
                        lambda root, url, graded: written.update(graded=graded) or ["a1"])
    args = _args(course, "--export", str(course / "g.csv"), "--feedback")
    assert cli.run(args) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert f"grades written to {course / 'g.csv'} (4 rows" in out
    assert written["url"].startswith("sqlite:///") and written["graded"] == ["a1"]
    assert "feedback written to" in out and "it failed for a1" in out
    assert "tampering caught" in out and "skipped" in out


def test_a_quiet_run_prints_no_tampering_or_skipped_line(course, capsys, monkeypatch):
    _fake(monkeypatch, report=engine.Report(
        outcomes=[engine.Outcome("ann", "a1", status.GRADED)], scores={("ann", "a1"): (1, 1)}))
    assert cli.run(_args(course)) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "tampering" not in out and "skipped" not in out and "written" not in out
