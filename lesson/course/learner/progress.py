"""What the learner has done, remembered between runs in `.nndebug/progress.json`.

A status is only ever written by a check that actually ran the notebook; it stays valid while
the notebook's content is unchanged (its hash is stored alongside).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

DONE, FAILING, NOT_STARTED = "done", "failing", "not started"


@dataclass
class Entry:
    status: str = NOT_STARTED
    notebook_hash: str = ""
    score: str = ""         # e.g. "4/6", from the last check
    hints_shown: int = 0


def notebook_hash(path: Path) -> str:
    """A hash of the notebook's cell sources, so saving without edits keeps a status."""
    from lesson.course.learner.runner import read_notebook

    nb = read_notebook(path)
    text = "\x00".join(cell.source for cell in nb.cells)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Progress:
    """The learner's progress file; every change is written to disk at once (atomically)."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / ".nndebug" / "progress.json"
        self.entries: dict[str, Entry] = {}
        if self.path.is_file():
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                self.entries = {name: Entry(**data) for name, data in raw.items()}
            except (ValueError, TypeError):
                self.entries = {}    # a damaged file: start again rather than crash

    def get(self, name: str) -> Entry:
        return self.entries.setdefault(name, Entry())

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {name: asdict(entry) for name, entry in self.entries.items()}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
