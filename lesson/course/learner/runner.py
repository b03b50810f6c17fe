"""Run one exercise notebook in a fresh kernel and judge its test cells the way nbgrader does.

A test cell (nbgrader metadata `grade: true`) passes when it runs without an error and writes
nothing to stderr except warnings, which the course's nbgrader configuration ignores as well.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: seconds one cell may run before it is interrupted (the same limit nbgrader applies)
CELL_TIMEOUT = 60
#: stderr text matching this is library chatter, not a failure (as in nbgrader_config.py)
IGNORED_STDERR = re.compile(r"(?i)warn")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class CellResult:
    """The outcome of one test cell."""

    name: str
    points: float
    passed: bool
    message: str = ""


@dataclass
class CheckResult:
    """The outcome of running one notebook: its tests, and any error outside them."""

    notebook: Path
    tests: list[CellResult] = field(default_factory=list)
    error: str = ""    # the kernel died or could not start

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.tests) and all(t.passed for t in self.tests)

    @property
    def first_failure(self) -> CellResult | None:
        return next((t for t in self.tests if not t.passed), None)

    @property
    def score(self) -> tuple[float, float]:
        """(points earned, points possible) over the visible tests."""
        return (sum(t.points for t in self.tests if t.passed), sum(t.points for t in self.tests))


def _failure_message(outputs: list) -> str:
    """The error's name and text; for a bare `assert`, the line that failed."""
    for out in outputs:
        if out.get("output_type") == "error":
            head = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")
            if out.get("evalue"):
                return head
            lines = [_ANSI.sub("", line) for line in out.get("traceback", [])]
            pointer = [ln for chunk in lines for ln in chunk.splitlines() if "--->" in ln]
            if not pointer:
                return head
            return f"{head} at: {pointer[-1].split('--->', 1)[1].strip()}"
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "the cell wrote to stderr: " + out.get("text", "").strip()[:300]
    return ""


def _cell_failed(outputs: list) -> bool:
    for out in outputs:
        if out.get("output_type") == "error":
            return True
        if (out.get("output_type") == "stream" and out.get("name") == "stderr"
                and not IGNORED_STDERR.search(out.get("text", ""))):
            return True
    return False


def run_notebook(path: Path, timeout: int = CELL_TIMEOUT) -> CheckResult:
    """Execute the notebook at `path` in its own folder and judge every test cell."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True,
        interrupt_on_timeout=True, resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up chatter on the terminal
        error_on_timeout={"ename": "CellTimeoutError", "evalue":
                          f"the cell ran for more than {timeout} s and was interrupted",
                          "traceback": []})
    result = CheckResult(path)
    try:
        client.execute()
    except Exception as exc:  # a dead kernel: report it, keep the cells that did run
        result.error = f"{type(exc).__name__}: {exc}"
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        outputs = cell.get("outputs", [])
        ran = cell.get("execution_count") is not None or bool(outputs)
        failed = _cell_failed(outputs) or not ran
        message = _failure_message(outputs) if ran else "the cell did not run"
        result.tests.append(CellResult(meta.get("grade_id", "?"), float(meta.get("points", 0)),
                                       not failed, message if failed else ""))
    return result
