"""Grades as CSV where an ungraded submission is never a zero.

`StatusCsvExport` is nbgrader's CSV export (the same columns, in the same order) with a last
column, `status`: `graded`, `late`, `tampering: <technique>`, `ungraded: <reason>`, or
`not submitted` (nbgrader's zero for work never handed in, kept). An ungraded submission's
score columns are empty, so a spreadsheet or an LMS import sees no number to average.
`nbgrader_config.py` makes it `nbgrader export`'s plugin; `nndebug grade --export` writes the
same file.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

from . import status

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
           "email", "raw_score", "late_submission_penalty", "score", "max_score", "status"]
NOT_SUBMITTED = "not submitted"


def rows(gb: Any, students: list[str] = (), assignments: list[str] = ()) -> list[dict]:
    """One row per assignment and student, as nbgrader's CSV export makes them, with status."""
    states = status.states(gb)
    out = []
    for assignment in gb.assignments:
        if assignments and assignment.name not in assignments:
            continue
        for student in gb.students:
            if students and student.id not in students:
                continue
            row = {"assignment": assignment.name, "duedate": assignment.duedate or "",
                   "student_id": student.id, "last_name": student.last_name or "",
                   "first_name": student.first_name or "", "email": student.email or "",
                   "max_score": assignment.max_score}
            try:
                sub = gb.find_submission(assignment.name, student.id)
            except MissingEntry:
                row.update(timestamp="", raw_score=0.0, late_submission_penalty=0.0, score=0.0,
                           status=NOT_SUBMITTED)
            else:
                state = states[(student.id, assignment.name)]
                row.update(timestamp=sub.timestamp or "", status=state.label)
                if state.graded:
                    penalty = sub.late_submission_penalty or 0.0
                    row.update(raw_score=sub.score, late_submission_penalty=penalty,
                               score=max(0.0, sub.score - penalty))
                else:
                    row.update(raw_score="", late_submission_penalty="", score="")
            out.append(row)
    return out


def write_csv(gb: Any, path: Path, students: list[str] = (), assignments: list[str] = ()
              ) -> int:
    """Write the rows to `path`; how many."""
    found = rows(gb, students, assignments)
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(found)
    return len(found)


def export_csv(url: str, path: Path) -> int:
    """`nndebug grade --export`: the gradebook at `url` to `path`."""
    with Gradebook(url) as gb:
        return write_csv(gb, path)


class StatusCsvExport(CsvExportPlugin):
    """nbgrader export's plugin: nbgrader's CSV with a status column (see the module)."""

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or "grades.csv"
        self.log.info("Exporting grades to %s", dest)
        write_csv(gradebook, Path(dest), [str(s) for s in self.student],
                  [str(a) for a in self.assignment])
