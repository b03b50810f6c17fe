"""`grade_class` end to end on a course of one small notebook, in a Dask cluster of this
process's own (one worker thread): what a run grades, skips, reports and writes, and what it
refuses, with real nbgrader, a real gradebook and the real clean room, in seconds. The
simulated class of tests/test_grading.py (`make test-class`) is the judge at scale."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from lesson.course.grading import engine, preprocessor, status
from lesson.course.grading import gradebook as gbk
from lesson.course.learner.classroom import nbgrader

ROOT = Path(__file__).resolve().parents[1]
A, STEM = "tiny", "double"           # an assignment and its one notebook
NB = f"{STEM}.ipynb"

SOLUTION = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
TESTS = "assert double(3) == 6\nassert double(-1) == -2\n"
ANSWERS = {"model": "def double(x):\n    return x + x\n",
           "wrong": "def double(x):\n    return x\n",
           "blank": None}                                 # the release as handed out


def _cell(source: str, **nbgrader_meta) -> nbformat.NotebookNode:
    meta = {"grade": False, "locked": False, "schema_version": 3, "solution": False,
            "task": False} | nbgrader_meta
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})


def _solution_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("Write `double`."),
                _cell(SOLUTION, grade_id="double", solution=True),
                _cell(TESTS, grade_id="test_double", grade=True, locked=True, points=2)]
    return nb


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A course whose one assignment is one notebook (an answer, a test of 2 points), its
    release generated."""
    root = tmp_path_factory.mktemp("tiny_course")
    shutil.copy2(ROOT / "nbgrader_config.py", root)
    (root / "solutions" / A).mkdir(parents=True)
    nbformat.write(_solution_notebook(), root / "solutions" / A / NB)
    nbgrader(root, "generate_assignment", A, "--force")
    return root


@pytest.fixture
def client():
    """A cluster per test: a task's key is its submission's fingerprint, so a cluster kept
    across tests would answer a resubmitted key from an earlier test's result."""
    from distributed import Client

    c = Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0")
    yield c
    c.close()


def _submit(root: Path, student: str, answer: str | None) -> Path:
    nb = nbformat.read(root / "exercises" / A / NB, as_version=4)
    if answer is not None:
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                    == "double")
        cell.source = answer
    target = root / "submitted" / student / A / NB
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return target


@pytest.fixture
def course(template, tmp_path, alembic_on_path) -> Path:
    """A copy of the course with the class's work handed in: three notebooks, one that is not
    JSON, and a folder without its notebook."""
    root = Path(shutil.copytree(template, tmp_path / "course"))
    for student, answer in ANSWERS.items():
        _submit(root, student, answer)
    garbled = root / "submitted" / "garbled" / A / NB
    garbled.parent.mkdir(parents=True)
    garbled.write_text("{this is not json")
    (root / "submitted" / "absent" / A).mkdir(parents=True)
    return root


def _grade(root: Path, client, **kwargs) -> engine.Report:
    return engine.grade_class(root, client=client, progress=False,
                              **({"timeout": 20.0} | kwargs))


def _url(root: Path) -> str:
    return gbk.db_url(root, None)


def test_a_class_is_graded_reported_and_written(course, client):
    report = _grade(course, client)
    kinds = {o.student: o.status for o in report.outcomes}
    assert kinds == {"absent": status.GRADED, "blank": status.GRADED, "garbled": status.UNGRADED,
                     "model": status.GRADED, "wrong": status.GRADED}
    assert [o.student for o in report.ungraded] == ["garbled"]
    (garbled,) = report.ungraded
    assert garbled.reason.startswith(f"{NB} is not a readable notebook (")
    absent = next(o for o in report.outcomes if o.student == "absent")
    assert absent.lines == [f"{NB} was not submitted: its tests score 0"]
    assert report.scores[("model", A)] == (2.0, 2.0)
    assert report.scores[("wrong", A)] == (0.0, 2.0)
    assert report.scores[("blank", A)] == (0.0, 2.0)
    assert report.scores[("absent", A)] == (0.0, 2.0)
    assert report.scores[("garbled", A)][0] is None              # ungraded, not zero
    assert report.states[("garbled", A)].kind == status.UNGRADED
    assert report.states[("garbled", A)].detail == garbled.reason
    assert report.states[("model", A)].kind == status.GRADED
    for student in ("model", "wrong", "blank"):
        written = course / "autograded" / student / A / NB
        assert written.is_file(), student
    assert not (course / "autograded" / "garbled" / A).exists()
    model_nb = nbformat.read(course / "autograded" / "model" / A / NB, as_version=4)
    assert not any(o.get("output_type") == "error" for c in model_nb.cells
                   for o in c.get("outputs", []))
    (note,) = report.notes
    assert note.startswith(f"{A}/{STEM}: the solution's answers take ") and \
        "per submission" in note
    assert report.skipped == [] and 0 < report.seconds < 300
    model = next(o for o in report.outcomes if o.student == "model")
    assert 0 < model.seconds < report.seconds
    assert garbled.seconds == 0.0                   # refused before any grading


def test_grading_again_takes_only_new_changed_or_ungraded_work(course, client, monkeypatch):
    _grade(course, client)

    def not_again(job):
        raise AssertionError("the solution was timed again")
    monkeypatch.setattr(engine, "measure_solution", not_again)   # its time is in the gradebook
    again = _grade(course, client)
    assert sorted(again.skipped) == [(s, A) for s in ("absent", "blank", "model", "wrong")]
    assert [o.student for o in again.outcomes] == ["garbled"]     # ungraded work is retried
    assert not any("could not be timed" in n for n in again.notes)
    _submit(course, "wrong", ANSWERS["model"])                     # handed in again, changed
    changed = _grade(course, client)
    assert [o.student for o in changed.outcomes] == ["garbled", "wrong"]
    assert changed.scores[("wrong", A)] == (2.0, 2.0)
    forced = _grade(course, client, force=True)
    assert len(forced.outcomes) == 5 and forced.skipped == []
    named = _grade(course, client, students=["model"])            # named: graded even unchanged
    assert [o.student for o in named.outcomes] == ["model"] and named.skipped == []


def test_a_budget_given_is_used_and_no_solution_is_timed(course, client, monkeypatch):
    def not_timed(job):
        raise AssertionError("a given budget needs no timing")
    monkeypatch.setattr(engine, "measure_solution", not_timed)
    report = _grade(course, client, budget=90.0)
    assert report.notes == [] and report.scores[("model", A)] == (2.0, 2.0)


def test_a_solution_that_cannot_be_timed_or_is_missing_gets_two_timeouts(course, client,
                                                                         monkeypatch):
    def fails(job):
        raise RuntimeError("no sandbox here")
    monkeypatch.setattr(engine, "measure_solution", fails)
    report = _grade(course, client, students=["model"])
    assert report.notes == [f"{A}/{STEM}: its solution could not be timed (no sandbox here); its "
                            "budget is two timeouts"]
    assert report.scores[("model", A)] == (2.0, 2.0)
    (course / "solutions" / A / NB).unlink()
    report = _grade(course, client, students=["model"])
    assert len(report.notes) == 1 and "no solution at" in report.notes[0] and \
        report.notes[0].endswith("its budget is two timeouts")


def test_a_task_that_fails_leaves_its_submission_ungraded_with_the_reason(course, client,
                                                                          monkeypatch):
    def lost(job):
        raise RuntimeError("the worker was lost")
    monkeypatch.setattr(engine, "grade_submission", lost)
    report = _grade(course, client, students=["model", "wrong"], budget=60.0)
    assert sorted((o.student, o.status) for o in report.outcomes) == [
        ("model", status.UNGRADED), ("wrong", status.UNGRADED)]
    for o in report.outcomes:
        assert o.reason == "the grading task failed: RuntimeError: the worker was lost"
        assert o.lines == [o.reason] and o.seconds == 0.0
        assert report.states[(o.student, A)].kind == status.UNGRADED
        assert not (course / "autograded" / o.student / A).exists()


def test_what_the_caller_asks_wrongly_is_usage(course, client):
    with pytest.raises(engine.Usage, match="no assignment nope in the gradebook"):
        _grade(course, client, assignments=["nope"])
    with pytest.raises(engine.Usage, match="^no submission from nobody under submitted/$"):
        _grade(course, client, students=["nobody"])
    with pytest.raises(engine.Usage, match=f"^no submission from nobody under submitted/ for {A}$"):
        _grade(course, client, students=["nobody"], assignments=[A])
    with pytest.raises(engine.Usage, match="MB"):
        _grade(course, client, memory_mb=64)          # below what a sandbox needs
    with pytest.raises(engine.Usage, match="--db must be sqlite:///PATH or postgresql://"):
        _grade(course, client, db="mysql://grades")
    assert gbk.scores(_url(course)) == {}             # nothing was graded


def test_a_course_without_submissions_is_infrastructure(course, client):
    shutil.rmtree(course / "submitted")
    with pytest.raises(engine.Infrastructure, match="no submitted/ folder"):
        _grade(course, client)


def test_a_submission_of_an_unknown_assignment_is_reported_not_graded(course, client):
    stray = course / "submitted" / "model" / "ex99"
    stray.mkdir()
    report = _grade(course, client, students=["model"])
    unknown = [o for o in report.outcomes if o.assignment == "ex99"]
    assert [(o.status, o.reason) for o in unknown] == [(status.UNGRADED, "unknown assignment")]
    assert report.scores[("model", A)] == (2.0, 2.0)


def test_the_jobs_limits_reach_the_clean_room_and_its_failures_the_report(course, client):
    """A loop in the answer stops at the run's timeout (not the course's default) and the
    report says so; a reach into the grader's modules is tampering, named."""
    _submit(course, "looper", "def double(x):\n    while True:\n        pass\n")
    _submit(course, "reacher", "import sys\n\ndef double(x):\n"
                               "    sys.modules['builtins'].AssertionError = Warning\n"
                               "    return 0\n")
    report = _grade(course, client, students=["looper", "reacher"], timeout=2.0, budget=30.0)
    looper = next(o for o in report.outcomes if o.student == "looper")
    assert looper.status == status.GRADED and report.scores[("looper", A)] == (0.0, 2.0)
    assert any(line.startswith("test_double: ") and "longer than 2 s" in line
               for line in looper.lines), looper.lines
    reacher = next(o for o in report.outcomes if o.student == "reacher")
    assert reacher.status == status.TAMPERING, reacher
    assert report.states[("reacher", A)].kind == status.TAMPERING
    assert any(line.startswith("TAMPERING in ") for line in reacher.lines), reacher.lines
    assert report.scores[("reacher", A)][0] == 0.0


def test_a_timeout_not_given_is_the_course_default_and_the_budget_two_of_them(course, client):
    (course / "solutions" / A / NB).unlink()
    report = engine.grade_class(course, client=client, progress=False, students=["model"])
    (note,) = report.notes
    assert "no solution at" in note
    nbformat.write(_solution_notebook(), course / "solutions" / A / NB)
    report = engine.grade_class(course, client=client, progress=False, students=["model"],
                                force=True)
    (note,) = report.notes
    assert note.endswith("budget 120 s per submission"), note     # 2 x the 60 s default


def test_progress_counts_every_submission(course, client, capsys):
    engine.grade_class(course, client=client, progress=True, timeout=20.0, budget=60.0)
    err = capsys.readouterr().err
    assert "grading" in err and "5/5" in err


def test_an_unknown_assignments_outcome_took_no_time(course, client):
    (course / "submitted" / "model" / "ex99").mkdir()
    report = _grade(course, client, students=["model"], budget=60.0)
    (unknown,) = [o for o in report.outcomes if o.assignment == "ex99"]
    assert unknown.seconds == 0.0 and unknown.lines == ["unknown assignment ex99"]


def test_a_gradebook_without_assignments_is_infrastructure(tmp_path, client, alembic_on_path):
    shutil.copy2(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "submitted" / "someone" / A).mkdir(parents=True)
    with pytest.raises(engine.Infrastructure, match="has no assignments"):
        _grade(tmp_path, client)


class _Workers:
    """A client whose workers' zygotes map `mapped` MB, or that cannot start one."""

    def __init__(self, mapped: dict | Exception) -> None:
        self.mapped = mapped

    def run(self, function):
        if isinstance(self.mapped, Exception):
            raise self.mapped
        return self.mapped


def test_memory_is_checked_against_the_largest_workers_zygote():
    from lesson.course.grading.sandbox import memory_floor_mb

    floor = memory_floor_mb(900.0)
    engine._check_memory(_Workers({"a": 500.0, "b": 900.0}), int(floor) + 1)
    with pytest.raises(engine.Usage, match="MB"):
        engine._check_memory(_Workers({"a": 900.0, "b": 500.0}), int(floor) - 1)
    engine._check_memory(_Workers({"a": 0.0}), 1)          # no zygote there: nothing known
    engine._check_memory(_Workers({}), 1)
    engine._check_memory(_Workers(OSError("no fork")), 1)  # started with the first notebook


def test_a_scheduler_that_does_not_answer_or_has_no_workers_is_infrastructure():
    import socket

    from distributed import LocalCluster

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(engine.Infrastructure, match="no Dask scheduler answers at"):
        engine._client(None, f"tcp://127.0.0.1:{port}", 1.0)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as empty:
        with pytest.raises(engine.Infrastructure, match="has no workers"):
            engine._client(None, empty.scheduler_address, 1.0)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as one:
        client, cluster = engine._client(None, one.scheduler_address, 5.0)
        try:
            assert cluster is None                      # someone else's: not ours to close
            assert len(client.nthreads()) == 1          # one worker is enough to start
        finally:
            client.close()


def test_a_local_cluster_has_one_single_threaded_process_per_worker():
    import os

    client, cluster = engine._client(2, None, 30.0)
    try:
        assert sorted(client.nthreads().values()) == [1, 1]
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        limits = client.run(lambda dask_worker: dask_worker.memory_manager.memory_limit)
        assert set(limits.values()) == {None}               # the sandbox limits memory
    finally:
        client.close()
        cluster.close()


@pytest.mark.parametrize("error,reason", [
    (preprocessor.GradingFailed("the clean room could not start"),
     f"{NB}: the clean room could not start"),
    (KeyError("cells"), f"{NB} could not be graded (KeyError: 'cells')"),
])
def test_a_notebook_the_grader_cannot_grade_leaves_its_submission_ungraded(
        course, client, monkeypatch, error, reason):
    def fails(self, nb, resources):
        raise error
    monkeypatch.setattr(preprocessor.CleanRoomExecute, "preprocess", fails)
    report = _grade(course, client, students=["model"], budget=60.0)
    (outcome,) = report.outcomes
    assert (outcome.status, outcome.reason) == (status.UNGRADED, reason)


def test_a_cell_without_an_id_is_named_by_its_place(course, client):
    """An nbformat 4.4 notebook has no cell ids: a report line names such a cell `cell N`."""
    nb = nbformat.read(course / "submitted" / "model" / A / NB, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("def broken(:\n    pass\n"))
    nb.nbformat_minor = 4
    for cell in nb.cells:
        cell.pop("id", None)
    (course / "submitted" / "model" / A / NB).write_text(nbformat.writes(nb, version=4))
    report = _grade(course, client, students=["model"], budget=60.0)
    (outcome,) = report.outcomes
    assert any(line.startswith("cell 1: SyntaxError") for line in outcome.lines), outcome.lines


def test_a_cluster_grade_class_started_is_closed_with_its_client(course, monkeypatch):
    from distributed import Client, LocalCluster

    made = []

    def local(workers, scheduler, connect_timeout):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                               dashboard_address=":0")
        made.append((Client(cluster), cluster))
        return made[-1]
    monkeypatch.setattr(engine, "_client", local)
    report = engine.grade_class(course, progress=False, students=["model"], budget=60.0)
    assert report.scores[("model", A)] == (2.0, 2.0)
    ((client, cluster),) = made
    assert client.status == "closed" and cluster.status.name == "closed"


def test_a_budget_given_reaches_each_notebook(course, client):
    _submit(course, "sleeper", "import time\n\ndef double(x):\n    time.sleep(1.5)\n"
                               "    return 2 * x\n")
    report = _grade(course, client, students=["sleeper"], budget=1.0)
    (outcome,) = report.outcomes
    assert any("the notebook's time budget (1 s for the student's code) is spent" in line
               for line in outcome.lines), outcome.lines
    assert report.scores[("sleeper", A)] == (0.0, 2.0)


def test_a_notebook_not_handed_in_does_not_stop_the_others(course):
    """A submission is graded notebook by notebook: one missing scores 0, the next is graded."""
    url = _url(course)
    job = {"student": "model", "assignment": A, "url": url,
           "config": engine.load_config(course),
           "notebooks": {"missing": None,
                         STEM: (course / "submitted" / "model" / A / NB).read_text()},
           "budget": {STEM: 60.0}, "fingerprint": "f", "write": False, "deny": [str(course)],
           "timeout": 20.0, "memory_mb": 3072}
    result = engine.grade_submission(job)
    assert result["error"] is None
    assert result["lines"] == ["missing.ipynb was not submitted: its tests score 0"]
    assert sorted(result["graded"]) == [STEM] and sorted(result["states"]) == [STEM, "missing"]


def test_a_task_answered_twice_is_recorded_once(course, client, monkeypatch):
    """Dask may hand back a rescheduled task twice: the first answer is the one written."""
    import distributed

    monkeypatch.setattr(distributed, "as_completed",
                        lambda futures: [f for f in futures for _ in (1, 2)])
    report = _grade(course, client, students=["model", "wrong"], budget=60.0)
    assert sorted(o.student for o in report.outcomes) == ["model", "wrong"]
