"""What happened to each submission, kept in the gradebook beside its grade.

nbgrader's own tables hold scores, and a submission that could not be graded is a row of
zeros there, which an export or an LMS reads as a zero. This module adds one table to the same
database, `nndebug_status`: one row per submitted notebook with its status (`graded`,
`tampering` with the technique, or `ungraded` with the reason), the fingerprint of the files it
was graded from and how long it took. It is written with the grade, into the gradebook being
written (SQLite or PostgreSQL), so what counts as "already graded" belongs to that gradebook.

Both paths write it: `nndebug grade` for every submission it grades, and plain
`nbgrader autograde` through the course's configuration (`autograde_started` and
`autograde_finished` are its pre- and post-convert hooks, `note` is called by the clean room
for each notebook). `late` is not stored: it comes from nbgrader's own late penalty.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRADED, TAMPERING, UNGRADED = "graded", "tampering", "ungraded"
_TABLE = "nndebug_status"


@dataclass(frozen=True)
class State:
    """One submission's status, folded over its notebooks: ungraded wins, then tampering."""

    kind: str                  # graded, tampering or ungraded
    detail: str = ""           # the reason (ungraded) or the technique (tampering)
    fingerprint: str = ""
    late: bool = False

    @property
    def label(self) -> str:
        """What the export's status column says: `graded`, `late`, `tampering: <technique>`,
        `ungraded: <reason>`."""
        if self.kind == GRADED:
            return "late" if self.late else GRADED
        return f"{self.kind}: {self.detail}"

    @property
    def graded(self) -> bool:
        return self.kind != UNGRADED


def _table(metadata: Any):
    from sqlalchemy import Column, Float, String, Table, Text

    return Table(_TABLE, metadata,
                 Column("student", String(128), primary_key=True),
                 Column("assignment", String(128), primary_key=True),
                 Column("notebook", String(128), primary_key=True),
                 Column("status", String(16), nullable=False),
                 Column("detail", Text, nullable=False, default=""),
                 Column("fingerprint", String(64), nullable=False, default=""),
                 Column("seconds", Float, nullable=False, default=0.0),
                 Column("updated", Float, nullable=False, default=0.0))


def _engine_and_table(gb: Any):
    from sqlalchemy import MetaData

    table = _table(MetaData())
    table.create(gb.engine, checkfirst=True)
    return gb.engine, table


def write(url: str, student: str, assignment: str, notebooks: dict[str, tuple[str, str]],
          fingerprint: str = "", seconds: float = 0.0) -> None:
    """Replace the rows of one submission: notebook -> (status, detail)."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        engine, table = _engine_and_table(gb)
        now = time.time()
        with engine.begin() as conn:
            conn.execute(table.delete().where(table.c.student == student,
                                              table.c.assignment == assignment))
            if notebooks:
                conn.execute(table.insert(), [
                    {"student": student, "assignment": assignment, "notebook": name,
                     "status": kind, "detail": detail[:500], "fingerprint": fingerprint,
                     "seconds": float(seconds), "updated": now}
                    for name, (kind, detail) in notebooks.items()])


def fold(rows: list[tuple[str, str, str]]) -> tuple[str, str, str]:
    """(status, detail, fingerprint) of a submission from its notebooks' rows."""
    for kind in (UNGRADED, TAMPERING):
        found = [r for r in rows if r[0] == kind]
        if found:
            return kind, "; ".join(dict.fromkeys(r[1] for r in found)), rows[0][2]
    return GRADED, "", rows[0][2] if rows else ""


def read(url: str) -> dict[tuple[str, str], State]:
    """(student, assignment) -> State of every submission in the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        return states(gb)


def states(gb: Any) -> dict[tuple[str, str], State]:
    """(student, assignment) -> State of every submission in the open gradebook `gb`, late
    from nbgrader. A submission this table does not describe (graded before it existed, or
    by an nbgrader without the course's hooks) is graded if nbgrader holds an automatic
    score for it, else ungraded."""
    engine, table = _engine_and_table(gb)
    with engine.connect() as conn:
        rows = conn.execute(table.select()).fetchall()
    grouped: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for row in rows:
        grouped.setdefault((row.student, row.assignment), []).append(
            (row.status, row.detail, row.fingerprint))
    out = {}
    for assignment in gb.assignments:
        for sub in assignment.submissions:
            key = (sub.student_id, assignment.name)
            late = bool(sub.total_seconds_late and sub.total_seconds_late > 0)
            if key in grouped:
                out[key] = State(*fold(grouped[key]), late=late)
            elif any(g.auto_score is not None or g.manual_score is not None
                     for nb in sub.notebooks for g in nb.grades):
                out[key] = State(GRADED, late=late)
            else:
                out[key] = State(UNGRADED, "never autograded")
    return out


def fingerprint(folder: Path) -> str:
    """A hash of a submission's files: a changed or new file means grading it again."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def technique(reasons: list[str]) -> str:
    """A tampering answer's first reason, without its line number: the export's technique."""
    import re

    first = reasons[0] if reasons else "reached into the grader"
    return re.sub(r"^line \d+: ", "", first)[:120]


# -- plain `nbgrader autograde`: its hooks (nbgrader_config.py) and the clean room's notes ---

_NOTED: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
_STARTED: dict[tuple[str, str], float] = {}


def _autograde_url() -> str | None:
    """The gradebook of the running `nbgrader autograde` (its --db or the course's)."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    if not AutogradeApp.initialized():
        return None
    return AutogradeApp.instance().coursedir.db_url


def _submission(notebooks: list[str]) -> tuple[str, str, Path] | None:
    """(student, assignment, folder) of a submission from its notebooks' paths
    (`submitted/<student>/<assignment>/<notebook>.ipynb`)."""
    if not notebooks:
        return None
    folder = Path(notebooks[0]).resolve().parent
    return folder.parent.name, folder.name, folder


def autograde_started(assignment: str, student: str, notebooks: list[str]) -> None:
    """nbgrader's pre-convert hook: the submission is ungraded until autograde finishes it
    (a notebook nbgrader cannot read never reaches the clean room). `assignment` and
    `student` are the command line's patterns; the paths name the submission."""
    import nbformat

    found, url = _submission(notebooks), _autograde_url()
    if found is None or url is None:
        return
    student, assignment, _ = found
    rows, unreadable = {}, []
    for path in notebooks:
        name = Path(path).stem
        try:
            nbformat.read(path, as_version=4)
            rows[name] = (UNGRADED, "nbgrader autograde stopped on it (its log says why)")
        except Exception as exc:
            rows[name] = (UNGRADED, f"{name}.ipynb is not a readable notebook "
                                    f"({type(exc).__name__})")
            unreadable.append(rows[name][1])
    _NOTED.pop((student, assignment), None)
    _STARTED[(student, assignment)] = time.monotonic()
    write(url, student, assignment, rows)
    if unreadable:                        # nbgrader will stop on it: the submission's line
        print(f"{student}/{assignment}: ungraded: {unreadable[0]}", flush=True)


def note(student: str, assignment: str, notebook: str, kind: str, detail: str = "") -> None:
    """The clean room's verdict on one notebook, kept until autograde finishes the submission."""
    _NOTED.setdefault((student, assignment), {})[notebook] = (kind, detail)


def failed(student: str, assignment: str, notebook: str, reason: str) -> None:
    """The clean room could not grade this notebook of a plain `nbgrader autograde` run:
    nbgrader drops the submission without its post-convert hook, so its status row gets the
    reason now, and the run prints the submission's one line."""
    url = _autograde_url()
    _NOTED.pop((student, assignment), None)
    _STARTED.pop((student, assignment), None)
    if url is None:
        return
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        engine, table = _engine_and_table(gb)
        with engine.begin() as conn:
            conn.execute(table.update().where(
                table.c.student == student, table.c.assignment == assignment,
                table.c.notebook == notebook).values(status=UNGRADED, detail=reason[:500],
                                                     updated=time.time()))
    print(f"{student}/{assignment}: ungraded: {reason.splitlines()[0][:200]}", flush=True)


def autograde_finished(assignment: str, student: str, notebooks: list[str]) -> None:
    """nbgrader's post-convert hook: every notebook was graded and saved; write what the clean
    room said about each, with the submission's fingerprint."""
    found, url = _submission(notebooks), _autograde_url()
    if found is None or url is None:
        return
    student, assignment, folder = found
    noted = _NOTED.pop((student, assignment), {})
    rows = {Path(p).stem: noted.get(Path(p).stem, (GRADED, "")) for p in notebooks}
    seconds = time.monotonic() - _STARTED.pop((student, assignment), time.monotonic())
    write(url, student, assignment, rows, fingerprint(folder), seconds)
    print(summary_line(url, student, assignment, seconds), flush=True)


def summary_line(url: str, student: str, assignment: str, seconds: float) -> str:
    """Plain autograde's one line per submission: its score and status."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        sub = gb.find_submission(assignment, student)
        state = states(gb)[(student, assignment)]
        return (f"{student}/{assignment}: {sub.score:g}/{sub.max_score:g} {state.label} "
                f"({seconds:.0f} s)")
