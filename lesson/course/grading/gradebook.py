"""nbgrader's own gradebook, written the way `nbgrader autograde` writes it.

The rows come from nbgrader's code: `Gradebook.update_or_create_student/submission` (what
`Autograde.init_assignment` calls) and the `SaveAutoGrades` and `AssignLatePenalties`
preprocessors run on the graded notebook, so `nbgrader export`, `generate_feedback` and the
formgrader read the result as their own. SQLite takes one writer: the engine's client writes
every result. PostgreSQL takes concurrent writers: each worker writes its own submission
(students and submissions are created up front, so workers never race on a row).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Submission:
    """One student's work on one assignment, as found under `submitted/`."""

    student: str
    assignment: str
    folder: Path

    @property
    def key(self) -> tuple[str, str]:
        return (self.student, self.assignment)


def db_url(root: Path, url: str | None) -> str:
    """The gradebook's URL: `--db`, else nbgrader's gradebook.db in the course folder."""
    if url:
        if not url.startswith(("sqlite:///", "postgresql://", "postgresql+psycopg://")):
            raise ValueError(f"--db must be sqlite:///PATH or postgresql://..., got {url!r}")
        return url.replace("postgresql://", "postgresql+psycopg://", 1)
    return f"sqlite:///{(root / 'gradebook.db').resolve()}"


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql")


def ensure_assignments(url: str, source_url: str) -> None:
    """Copy the assignments (notebooks, source, grade and solution cells) from the course's
    own gradebook into another database (a fresh PostgreSQL one), as generate_assignment
    would have put them there."""
    from nbgrader.api import Gradebook, MissingEntry

    if url == source_url:
        return
    with Gradebook(source_url) as src, Gradebook(url) as dst:
        for assignment in src.assignments:
            try:
                dst.find_assignment(assignment.name)
                continue
            except MissingEntry:
                pass
            dst.update_or_create_assignment(assignment.name, duedate=assignment.duedate)
            for nb in assignment.notebooks:
                dst.update_or_create_notebook(nb.name, assignment.name)
                for cell in nb.source_cells:
                    dst.update_or_create_source_cell(
                        cell.name, nb.name, assignment.name, cell_type=cell.cell_type,
                        locked=cell.locked, source=cell.source, checksum=cell.checksum)
                for cell in nb.grade_cells:
                    dst.update_or_create_grade_cell(
                        cell.name, nb.name, assignment.name, max_score=cell.max_score,
                        cell_type=cell.cell_type)
                for cell in nb.solution_cells:
                    dst.update_or_create_solution_cell(cell.name, nb.name, assignment.name)
                for cell in nb.task_cells:
                    dst.update_or_create_task_cell(cell.name, nb.name, assignment.name,
                                                   max_score=cell.max_score,
                                                   cell_type=cell.cell_type)


def notebooks_of(url: str, assignment: str) -> list[str]:
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        return [nb.name for nb in gb.find_assignment(assignment).notebooks]


def prepare(url: str, submissions: list[Submission], timestamps: dict) -> None:
    """Create the students and submissions (what `Autograde.init_assignment` does first)."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        for sub in submissions:
            gb.update_or_create_student(sub.student)
            stamp = timestamps.get(sub.key)
            if stamp:
                gb.update_or_create_submission(sub.assignment, sub.student, timestamp=stamp)
            else:
                gb.update_or_create_submission(sub.assignment, sub.student)


def record(url: str, student: str, assignment: str, graded: dict[str, Any], config: Any,
           states: dict[str, tuple[str, str]], fingerprint: str, seconds: float) -> None:
    """Write one graded submission: nbgrader's SaveAutoGrades and AssignLatePenalties on each
    graded notebook (a notebook that was not submitted scores 0, nbgrader's rule), then its
    status rows (`status.write`: notebook -> (status, detail)) with its fingerprint."""
    from . import status

    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    for name, nb_json in graded.items():
        nb = nbformat.from_dict(nb_json)
        resources = {"nbgrader": {"notebook": name, "assignment": assignment,
                                  "student": student, "db_url": url}}
        for pp in (SaveAutoGrades(config=config), AssignLatePenalties(config=config)):
            nb, resources = pp(nb, resources)
    with Gradebook(url) as gb:
        for notebook in gb.find_assignment(assignment).notebooks:
            if notebook.name not in graded:
                submitted = gb.find_submission_notebook(notebook.name, assignment, student)
                for grade in submitted.grades:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                gb.db.commit()
    status.write(url, student, assignment, states, fingerprint, seconds)


def scores(url: str) -> dict[tuple[str, str], tuple[float | None, float]]:
    """(student, assignment) -> (score, max_score) of every submission, as the course's
    `nbgrader export` reports them: the score is None where it could not be graded."""
    from nbgrader.api import Gradebook

    from . import status

    with Gradebook(url) as gb:
        states = status.states(gb)
        return {(sub.student_id, a.name): (
                    float(sub.score) if states[(sub.student_id, a.name)].graded else None,
                    float(sub.max_score))
                for a in gb.assignments for sub in a.submissions}


def cell_scores(url: str, student: str, assignment: str) -> dict[str, tuple[float, float]]:
    """Test cell -> (score, max_score) over the assignment's notebooks."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        out = {}
        for nb in gb.find_submission(assignment, student).notebooks:
            out.update({g.name: (float(g.score), float(g.max_score)) for g in nb.grades})
        return out


def write_autograded(autograded: Path, graded: dict[str, Any]) -> None:
    """The autograded notebooks (what generate_feedback reads)."""
    import nbformat

    autograded.mkdir(parents=True, exist_ok=True)
    for name, nb_json in graded.items():
        target = autograded / f"{name}.ipynb"
        if target.exists():
            os.chmod(target, 0o644)
        nbformat.write(nbformat.from_dict(nb_json), target)


def forget_autograded(autograded: Path) -> None:
    """An ungraded submission's old autograded notebooks go (nbgrader autograde does the
    same on a failure): feedback must not show a grade it no longer has."""
    import shutil

    if autograded.is_dir():
        shutil.rmtree(autograded, ignore_errors=True)
