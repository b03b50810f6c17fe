"""A submission's time budget (`lesson.course.grading.budget`): a few times the solution's normal
time, never under two timeouts, the normal time kept in the gradebook per solution text and
measured again when the solution changes. The clean room is replaced by a stand-in that says
how long "the solution" took, so these run in a second; the graded class measures it for real
(tests/test_grading_limits.py, slow)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from lesson.course.grading import budget as bdg
from lesson.course.grading import cleanroom
from lesson.course.grading.cleanroom import Verdicts


@pytest.fixture()
def url(tmp_path, alembic_on_path) -> str:
    return f"sqlite:///{tmp_path / 'gradebook.db'}"


def test_the_budget_is_four_solution_times_and_never_under_two_timeouts():
    assert bdg.BUDGET_FACTOR == 4.0
    assert bdg.budget_for(100.0, 30) == 400.0             # the solution's time decides
    assert bdg.budget_for(15.0, 30) == 60.0               # two timeouts decide
    assert bdg.budget_for(15.01, 30) == pytest.approx(60.04)   # just past the edge
    assert bdg.budget_for(None, 30) == 60.0               # no solution to measure
    assert bdg.budget_for(0.0, 1.5) == 3.0


def test_the_digest_is_the_texts_sha256():
    assert bdg.digest("abc") == ("ba7816bf8f01cfea414140de5dae2223"
                                 "b00361a396177a9cb410ff61f20015ad")
    assert bdg.digest("abc") != bdg.digest("abd")
    assert len(bdg.digest("\udcff")) == 64                # text that is not UTF-8 still hashes


def test_a_kept_time_is_read_only_for_its_own_solution_notebook_and_assignment(url):
    assert bdg.recorded(url, "a1", "nb", "h1") is None    # nothing kept yet
    bdg.record(url, "a1", "nb", "h1", 12)
    got = bdg.recorded(url, "a1", "nb", "h1")
    assert got == 12.0 and isinstance(got, float)
    assert bdg.recorded(url, "a1", "nb", "h2") is None    # another solution text
    assert bdg.recorded(url, "a1", "other", "h1") is None
    assert bdg.recorded(url, "a2", "nb", "h1") is None
    bdg.record(url, "a1", "other", "h1", 3.5)             # a second notebook beside it
    bdg.record(url, "a1", "nb", "h2", 7.25)               # the solution changed: replaced
    assert bdg.recorded(url, "a1", "nb", "h2") == 7.25
    assert bdg.recorded(url, "a1", "nb", "h1") is None
    assert bdg.recorded(url, "a1", "other", "h1") == 3.5  # the other notebook's time stays
    bdg.record(url, "a2", "nb", "h3", 1.0)                # the same notebook name elsewhere
    assert bdg.recorded(url, "a2", "nb", "h3") == 1.0
    assert bdg.recorded(url, "a1", "nb", "h2") == 7.25


def test_the_solutions_path_is_source_assignment_notebook(tmp_path):
    assert bdg.solution_path(tmp_path, "source", "a1", "nb") == tmp_path / "source/a1/nb.ipynb"


@pytest.fixture()
def clean_room(monkeypatch) -> list:
    """The clean room replaced: each call is kept, and "the solution" took 2.5 s."""
    calls: list = []

    def grade(nb, limits, deny=()):
        calls.append((nb, limits, list(deny)))
        return Verdicts(spent=2.5)

    monkeypatch.setattr(cleanroom, "grade_notebook", grade)
    return calls


def _solution(tmp_path: Path, text: str = "x = 1") -> Path:
    path = tmp_path / "source" / "a1" / "nb.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)]), path)
    return path


def test_the_normal_time_is_measured_once_and_again_when_the_solution_changes(
        url, tmp_path, clean_room):
    path = _solution(tmp_path)
    assert bdg.normal_time(url, "a1", "nb", path, 30, 2048, ["/secret"]) == 2.5
    nb, limits, deny = clean_room[0]
    assert nb.cells[0].source == "x = 1"
    assert (limits.timeout_s, limits.memory_mb, deny) == (30, 2048, ["/secret"])
    assert bdg.recorded(url, "a1", "nb", bdg.digest(path.read_text())) == 2.5
    assert bdg.normal_time(url, "a1", "nb", path, 30, 2048, []) == 2.5
    assert len(clean_room) == 1                           # kept: not measured again
    _solution(tmp_path, "x = 2")                          # an edited solution
    assert bdg.normal_time(url, "a1", "nb", path, 30, 2048, []) == 2.5
    assert len(clean_room) == 2


def test_no_solution_in_the_course_folder_gives_no_normal_time(url, tmp_path, clean_room):
    assert bdg.normal_time(url, "a1", "nb", tmp_path / "missing.ipynb", 30, 2048, []) is None
    (tmp_path / "folder.ipynb").mkdir()
    assert bdg.normal_time(url, "a1", "nb", tmp_path / "folder.ipynb", 30, 2048, []) is None
    assert clean_room == []


def test_a_solution_the_clean_room_cannot_run_is_an_error_and_nothing_is_kept(
        url, tmp_path, monkeypatch):
    monkeypatch.setattr(cleanroom, "grade_notebook",
                        lambda nb, limits, deny=(): Verdicts(error="the kernel died"))
    path = _solution(tmp_path)
    with pytest.raises(RuntimeError, match="could not be run to measure it: the kernel died"):
        bdg.normal_time(url, "a1", "nb", path, 30, 2048, [])
    assert bdg.recorded(url, "a1", "nb", bdg.digest(path.read_text())) is None
