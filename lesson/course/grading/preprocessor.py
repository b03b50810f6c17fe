"""The clean room inside plain `nbgrader autograde` (and the formgrader's Autograde button).

`nbgrader_config.py` puts `CleanRoomExecute` in place of nbgrader's `Execute` in the autograde
pipeline: after nbgrader has restored the locked cells from the gradebook, the notebook's
outputs come from `cleanroom.grade_notebook` instead of the student's kernel. nbgrader's own
steps that follow (IgnorePattern, LimitOutput, SaveAutoGrades, ...) score those outputs as
usual, so a test cell fails exactly when its clean-room run raised, and a tampering answer's
tests carry an error that says why.
"""
from __future__ import annotations

import os
from typing import Any

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Float, Integer, List, Unicode

from .cleanroom import grade_notebook
from .sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Limits


class CleanRoomExecute(NbGraderPreprocessor):
    """Execute a submission in the clean room: tests in a trusted process, answers sandboxed."""

    timeout = Float(DEFAULT_TIMEOUT_S, help="seconds one cell or one call of a student "
                    "function may run before it is interrupted (scores 0)").tag(config=True)
    memory_mb = Integer(DEFAULT_MEMORY_MB, help="memory limit of the student's sandbox "
                        "(MB)").tag(config=True)
    deny = List(Unicode(), help="extra folders the sandbox may never read (the course "
                "folder always)").tag(config=True)
    deny_cwd = Bool(True, help="deny the current folder too: nbgrader runs in the course "
                    "folder; a Dask worker runs anywhere and is given the course in `deny`")

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources.get("nbgrader", {})
        verdicts = grade_notebook(nb, Limits(timeout_s=self.timeout, memory_mb=self.memory_mb),
                                  deny=[os.getcwd()] * self.deny_cwd + list(self.deny))
        who = f"{info.get('student', '?')}/{info.get('assignment', '?')}/{info.get('notebook', '?')}"
        if verdicts.error:
            self.log.error("clean room failed for %s: %s", who, verdicts.error)
        for label, reasons in verdicts.tampering.items():
            self.log.warning("TAMPERING %s, cell %s: %s", who, label, "; ".join(reasons))
        resources.setdefault("nndebug", {})["tampering"] = verdicts.tampering
        return nb, resources
