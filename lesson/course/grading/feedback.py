"""Feedback a student may keep: every test's name, points and message, no hidden test.

nbgrader's `generate_feedback` renders the autograded notebook, whose test cells were restored
from the gradebook with their hidden tests. `HideHiddenTests` (a GenerateFeedback
preprocessor, after GetGrades) gives each test cell what the student saw in the release: the
visible lines, with one comment in place of the hidden ones, under a first line that names
the test and its points. A test cell's error keeps its type, its message and the student's
own frames; any traceback line that could quote the test's source (a kernel's traceback
does) is dropped. `nbgrader_config.py` lists it, and `nndebug grade --feedback` runs
generate_feedback with it whatever the course's configuration says.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor

#: GenerateFeedback's preprocessors with the hiding step (nbgrader's own two around it)
PREPROCESSORS = ["nbgrader.preprocessors.GetGrades",
                 "lesson.course.grading.feedback.HideHiddenTests",
                 "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]
HIDDEN_NOTE = "# (hidden tests: run at grading, not shown)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _points(value: Any) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return "?"


class HideHiddenTests(NbGraderPreprocessor):
    """Test cells as released (hidden lines out), named, with their points and message."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        meta = cell.metadata.get("nbgrader", {})
        if not (utils.is_grade(cell) and not utils.is_solution(cell)):
            return cell, resources
        cleaner = ClearHiddenTests(config=self.config)
        lines, hidden = [], False
        for line in cell.source.split("\n"):
            if cleaner.begin_test_delimeter in line:
                hidden = True
                lines.append(HIDDEN_NOTE)
            elif cleaner.end_test_delimeter in line:
                hidden = False
            elif not hidden:
                lines.append(line)
        header = (f"# {meta.get('grade_id', 'test')}: {_points(meta.get('score'))} of "
                  f"{_points(meta.get('points'))} points")
        cell.source = "\n".join([header] + lines)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = _students_part(out)
        return cell, resources


def _students_part(out: dict) -> list[str]:
    """An error's message and what follows it (the student's own frames, from the clean
    room); the frames before it are the test's and may quote its lines."""
    text = _ANSI.sub("", "".join(out.get("traceback", [])))
    head = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"
    mark = text.find(head)
    tail = text[mark + len(head):].strip("\n") if mark >= 0 else ""
    return [head] + ([tail] if tail else [])


def generate_feedback(root: Path, url: str, assignments: list[str]) -> list[str]:
    """nbgrader generate_feedback for each assignment with HideHiddenTests in place;
    the assignments it failed on, with nbgrader's last error line."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]))
    failed = []
    for assignment in assignments:
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_feedback", assignment, "--force",
             f"--CourseDirectory.db_url={url}",
             f"--GenerateFeedback.preprocessors={PREPROCESSORS!r}"],
            cwd=root, env=env, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            last = [ln for ln in done.stderr.splitlines() if "ERROR" in ln][-1:]
            failed.append(f"{assignment} ({last[0].strip() if last else done.returncode})")
    return failed


# -- the check that no page shows a hidden test --------------------------------------------

def hidden_source(solution: Path, release: Path) -> set[str]:
    """The lines of a solution's hidden tests worth looking for in a page: not blank, not
    shorter than 7 characters, and not part of a line shown elsewhere (in the release, or in
    the solution outside its hidden tests: a student's page shows their own answer, which may
    hold the same call as a hidden test)."""
    import nbformat

    markers = ClearHiddenTests()
    shown = [ln.strip() for c in nbformat.read(release, as_version=4).cells
             for ln in c.source.splitlines()]
    found: set[str] = set()
    for cell in nbformat.read(solution, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if markers.begin_test_delimeter in line:
                inside = True
            elif markers.end_test_delimeter in line:
                inside = False
            elif inside:
                if len(line.strip()) > 6:
                    found.add(line.strip())
            else:
                shown.append(line.strip())
    return {ln for ln in found if not any(ln in other for other in shown)}


def page_text(page: Path) -> str:
    """A feedback page as its reader sees it: tags out, entities decoded, spaces folded."""
    import html

    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def leaks(page: Path, hidden: set[str]) -> list[str]:
    """The hidden lines (and hidden-test markers) that `page` shows."""
    text = page_text(page)
    found = [ln for ln in sorted(hidden) if " ".join(ln.split()) in text]
    cleaner = ClearHiddenTests()
    return found + [m for m in (cleaner.begin_test_delimeter, cleaner.end_test_delimeter)
                    if m in text]
