"""The instructor's side, scripted: generate, submit, autograde and export with real nbgrader.

Tests and the grading benchmark drive nbgrader through these helpers on a simulated class in
a temporary copy of the course, exactly as an instructor would from the command line.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

COURSE_FILES = ("nbgrader_config.py", "solutions", "exercises")


def nbgrader(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `nbgrader ARGS` in the course folder `root` with this interpreter's nbgrader."""
    env = dict(os.environ)
    # nbgrader calls the `alembic` executable that sits next to the venv's python
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def copy_course(source: Path, target: Path, release: bool = False) -> Path:
    """Copy the course's instructor files to `target` (the release too if `release`)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in COURSE_FILES:
        if name == "exercises" and not release:
            continue
        src = source / name
        if src.is_dir():
            shutil.copytree(src, target / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        else:
            shutil.copy2(src, target / name)
    return target


def generate_release(root: Path) -> None:
    """`nbgrader generate_assignment` for every assignment in solutions/."""
    nbgrader(root, "generate_assignment", "*", "--force")


def submit(root: Path, student: str, assignment: str, notebook: Path) -> Path:
    """Place a student's notebook where nbgrader collects submissions."""
    target = root / "submitted" / student / assignment / notebook.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(notebook, target)
    return target


def autograde(root: Path, *extra: str) -> None:
    """Grade every submission of every student (again if already graded)."""
    nbgrader(root, "autograde", "*", "--force", *extra)


def clone(root: Path, target: Path) -> Path:
    """A copy of a course with its release and gradebook, but no submissions: graders that
    work on separate copies can run side by side (one SQLite gradebook each)."""
    shutil.copytree(root, target, ignore=shutil.ignore_patterns(
        "submitted", "autograded", "feedback", "drafts", "grades.csv"))
    return target


def autograde_each(roots: list[Path], jobs: int = 2, *extra: str) -> None:
    """Autograde several course copies at once, `jobs` at a time (kernels spend much of
    their time starting up and waiting, so two graders share two cores well)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(autograde, root, *extra) for root in roots]:
            future.result()


def export_grades(root: Path) -> dict[tuple[str, str], tuple[float | None, float]]:
    """`nbgrader export`: (student, assignment) -> (score, max_score); the score is None
    where the course's export leaves it empty (a submission that could not be graded)."""
    out = root / "grades.csv"
    nbgrader(root, "export", "--to", str(out))
    with out.open(newline="") as f:
        return {(row["student_id"], row["assignment"]): (
                    float(row["score"]) if row["score"] != "" else None,
                    float(row["max_score"]))
                for row in csv.DictReader(f)}


def gradebook_scores(root: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(student, assignment) -> (score, max_score) read from the gradebook in-process: what
    `export_grades` gives, without starting nbgrader again."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {(sub.student_id, assignment.name): (float(sub.score), float(sub.max_score))
                for assignment in gb.assignments for sub in assignment.submissions}


def cell_grades(root: Path, student: str, assignment: str, notebook: str
                ) -> dict[str, tuple[float, float]]:
    """Test cell name -> (score, max_score) of one autograded notebook, from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(notebook, assignment, student)
        return {g.name: (float(g.score), float(g.max_score)) for g in nb.grades}
