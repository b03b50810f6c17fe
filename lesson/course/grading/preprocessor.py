"""The clean room inside plain `nbgrader autograde` (and the formgrader's Autograde button).

`nbgrader_config.py` puts `CleanRoomExecute` in place of nbgrader's `Execute` in the autograde
pipeline: after nbgrader has restored the locked cells from the gradebook, the notebook's
outputs come from `cleanroom.grade_notebook` instead of the student's kernel. nbgrader's own
steps that follow (IgnorePattern, LimitOutput, SaveAutoGrades, ...) score those outputs as
usual, so a test cell fails exactly when its clean-room run raised, and a tampering answer's
tests carry an error that says why. When the clean room itself cannot grade the notebook it
raises `GradingFailed`: nbgrader then marks the submission failed instead of saving zeros.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Float, Integer, List, Unicode

from . import status
from .cleanroom import grade_notebook
from .sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Limits, MemoryTooLow


class GradingFailed(RuntimeError):
    """The clean room could not grade a notebook: the submission is ungraded, not zero."""


class CleanRoomExecute(NbGraderPreprocessor):
    """Execute a submission in the clean room: tests in a trusted process, answers sandboxed."""

    timeout = Float(DEFAULT_TIMEOUT_S, help="seconds one cell or one call of a student "
                    "function may run before it is interrupted (scores 0)").tag(config=True)
    memory_mb = Integer(DEFAULT_MEMORY_MB, help="memory limit of the student's sandbox "
                        "(MB)").tag(config=True)
    budget = Float(0.0, help="wall seconds the student's code may take over one notebook; "
                   "0: a few times what the instructor's solution takes (measured once per "
                   "gradebook), and at least two timeouts").tag(config=True)
    deny = List(Unicode(), help="extra folders the sandbox may never read (the course "
                "folder always)").tag(config=True)
    deny_cwd = Bool(True, help="deny the current folder too: nbgrader runs in the course "
                    "folder; a Dask worker runs anywhere and is given the course in `deny`")
    note_status = Bool(True, help="tell `status` each notebook's verdict for the autograde "
                       "hooks to write (nndebug grade writes its own)")

    def _denied(self) -> list[str]:
        return [os.getcwd()] * self.deny_cwd + list(self.deny)

    def _budget(self, info: dict) -> float:
        """`budget`, or the default from the solution's time kept in the gradebook."""
        from . import budget

        if self.budget > 0:
            return self.budget
        course = self.config.get("CourseDirectory", {})
        solution = budget.solution_path(Path(course.get("root", ".")).resolve(),
                                        course.get("source_directory", "source"),
                                        info["assignment"], info["notebook"])
        try:
            normal = budget.normal_time(info["db_url"], info["assignment"], info["notebook"],
                                        solution, self.timeout, self.memory_mb, self._denied())
        except RuntimeError as exc:
            self.log.warning("%s: the budget is two timeouts (%s)", info["notebook"], exc)
            normal = None
        return budget.budget_for(normal, self.timeout)

    def _failed(self, info: dict, message: str, reason: str) -> GradingFailed:
        """The error that makes nbgrader drop the submission; in plain autograde its status
        says why at once (nbgrader skips the post-convert hook of a failed submission)."""
        if self.note_status and "student" in info:
            status.failed(info["student"], info["assignment"], info["notebook"], reason)
        return GradingFailed(message)

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources.get("nbgrader", {})
        who = f"{info.get('student', '?')}/{info.get('assignment', '?')}/{info.get('notebook', '?')}"
        try:
            limits = Limits(timeout_s=self.timeout, memory_mb=self.memory_mb,
                            budget_s=self._budget(info) if "db_url" in info else self.budget or None)
            verdicts = grade_notebook(nb, limits, deny=self._denied())
        except MemoryTooLow as exc:
            raise self._failed(info, f"{who}: {exc}", str(exc)) from None
        if verdicts.error:
            raise self._failed(info, f"the clean room could not grade {who}: {verdicts.error}",
                               f"the clean room could not grade it: {verdicts.error}")
        for label, reasons in verdicts.tampering.items():
            self.log.warning("TAMPERING %s, cell %s: %s", who, label, "; ".join(reasons))
        if self.note_status and "student" in info:
            reasons = [r for rs in verdicts.tampering.values() for r in rs]
            status.note(info["student"], info["assignment"], info["notebook"],
                        status.TAMPERING if reasons else status.GRADED,
                        status.technique(reasons) if reasons else "")
        resources.setdefault("nndebug", {}).update(
            tampering=verdicts.tampering, spent=verdicts.spent, budget=limits.budget_s)
        return nb, resources
