"""Run one exercise notebook in a fresh kernel and judge its test cells the way nbgrader does.

A test cell (nbgrader metadata `grade: true`) passes when it runs without an error and writes
nothing to stderr except warnings, which the course's nbgrader configuration ignores as well.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

#: seconds one cell may run before it is interrupted (the same limit nbgrader applies)
CELL_TIMEOUT = 60
#: kernels started for one notebook before a kernel that dies at start-up is reported
START_ATTEMPTS = 3
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
    printed: str = ""      # what the test cell wrote to stdout (a clipped value, an accuracy)
    index: int = 0         # the cell's position in the notebook that ran (1 is the first)


@dataclass
class CellError:
    """The first error raised in a cell that is not a test: the student's own code."""

    cell: str              # the answer cell's grade_id, or "cell N"
    line: int | None
    error: str             # "SyntaxError: invalid syntax"
    index: int = 0         # the cell's position: only the tests below it can depend on it

    @property
    def stub(self) -> bool:
        """True when the cell stopped at a NotImplementedError: a starting stub not written."""
        return self.error.startswith("NotImplementedError")


@dataclass
class CheckResult:
    """The outcome of running one notebook: its tests, and any error outside them."""

    notebook: Path
    tests: list[CellResult] = field(default_factory=list)
    error: str = ""    # the kernel died or could not start
    answer_error: CellError | None = None

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


class UnreadableNotebook(ValueError):
    """A notebook file nbformat cannot read: empty, cut short, not JSON, not a notebook."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} cannot be read: {reason}")
        self.path, self.reason = Path(path), reason


def _cut_short(text: str) -> bool:
    """True when JSON text ends inside a string or with a bracket still open."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_string or depth > 0


def _why_unreadable(text: str, exc: Exception) -> str:
    """What is wrong with a notebook file's text, in the learner's words."""
    import json

    if not text.strip():
        return "the file is empty"
    try:
        json.loads(text)
    except json.JSONDecodeError as bad:
        if _cut_short(text):
            last = text.count("\n") + 1
            return f"the file is cut short (it stops in the middle of the notebook, line {last})"
        return f"the file is not valid JSON ({bad.msg}: line {bad.lineno} column {bad.colno})"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"the file is JSON but not a notebook ({type(exc).__name__}: {first})"


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at `path` (nbformat 4); UnreadableNotebook says why when it is not one."""
    import nbformat

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableNotebook(path, f"the file is not text ({exc.reason} at byte "
                                       f"{exc.start})") from exc
    except OSError as exc:
        raise UnreadableNotebook(path, exc.strerror or str(exc)) from exc
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds, not all ValueErrors
        raise UnreadableNotebook(path, _why_unreadable(text, exc)) from exc


def _traceback_lines(out: dict) -> list[str]:
    return [ln for chunk in out.get("traceback", []) for ln in _ANSI.sub("", chunk).splitlines()]


def _pointed(line: str) -> str:
    """The code of a traceback line IPython points at (`----> 3 code`)."""
    return re.sub(r"^\d+\s+", "", line.split("--->", 1)[1].strip())


def _failure_message(outputs: list) -> str:
    """The error's name and text, and the line that failed: for an assert, the assert (one
    whose message is only a value, `AssertionError: 7.0`, says little without it); for an
    error the student's code raised, the test's line that called it and the line that raised."""
    for out in outputs:
        if out.get("output_type") == "error":
            head = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")
            pointer = [_pointed(ln) for ln in _traceback_lines(out) if "--->" in ln]
            if out.get("ename") == "AssertionError":
                return f"{head}\n    failing line: {pointer[-1]}" if pointer else head
            if not pointer:
                return head
            raised = f"\n    raised at: {pointer[-1]}" if len(pointer) > 1 else ""
            return f"{head}\n    failing line: {pointer[0]}{raised}"
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "the cell wrote to stderr: " + out.get("text", "").strip()[:300]
    return ""


def _stdout(outputs: list) -> str:
    return "".join(o.get("text", "") for o in outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout").strip()


def _answer_error(index: int, cell: dict) -> CellError | None:
    """The error a cell that is not a test raised (a SyntaxError, a NameError), if any."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines = _traceback_lines(out)
            found = [int(m.group(1)) for ln in lines
                     for m in [re.search(r"line (\d+)", ln)] if m]
            arrow = [int(m.group(1)) for ln in lines for m in [re.match(r"-+>\s*(\d+)", ln)] if m]
            line = (arrow or found or [None])[-1]
            name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
            error = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")
            return CellError(name, line, error, index)
    return None


def _cell_failed(outputs: list) -> bool:
    for out in outputs:
        if out.get("output_type") == "error":
            return True
        if (out.get("output_type") == "stream" and out.get("name") == "stderr"
                and not IGNORED_STDERR.search(out.get("text", ""))):
            return True
    return False


def _died_starting(exc: Exception, nb: nbformat.NotebookNode) -> bool:
    """True when the kernel died before it ran anything: no code of the notebook ran, so
    starting a new one is safe. (Kernels started side by side can race for the same free port;
    the loser dies in its first second.)"""
    started = any(c.get("execution_count") is not None or c.get("outputs")
                  for c in nb.cells if c.cell_type == "code")
    return "before replying to kernel_info" in str(exc) and not started


def run_notebook(path: Path, timeout: int = CELL_TIMEOUT,
                 only_tests: set[str] | None = None,
                 own_cells: set[str] | None = None) -> CheckResult:
    """Execute the notebook at `path` in its own folder and judge every test cell (with
    `only_tests`, only the test cells of those grade ids run: one clinic case, say; every other
    cell still runs, so the student's own helpers are defined as in grading). With `own_cells`,
    an error raised in another answer cell (another case's starting stub) is not reported."""
    from nbclient import NotebookClient

    path = Path(path)
    nb = read_notebook(path)
    if only_tests is not None:
        nb.cells = [c for c in nb.cells
                    if not c.get("metadata", {}).get("nbgrader", {}).get("grade")
                    or c.metadata["nbgrader"].get("grade_id") in only_tests]
    result = CheckResult(path)
    for attempt in range(1, START_ATTEMPTS + 1):
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", allow_errors=True,
            interrupt_on_timeout=True, resources={"metadata": {"path": str(path.parent)}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up chatter
            error_on_timeout={"ename": "CellTimeoutError", "evalue":
                              f"the cell ran for more than {timeout} s and was interrupted",
                              "traceback": []})
        try:
            client.execute()
        except Exception as exc:  # a dead kernel: report it, keep the cells that did run
            if _died_starting(exc, nb) and attempt < START_ATTEMPTS:
                continue
            result.error = f"{type(exc).__name__}: {exc}"
        break
    for index, cell in enumerate(nb.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if not meta.get("grade"):
            foreign = (own_cells is not None and meta.get("solution")
                       and meta.get("grade_id") not in own_cells)
            if result.answer_error is None and not foreign:
                result.answer_error = _answer_error(index, cell)
            continue
        outputs = cell.get("outputs", [])
        ran = cell.get("execution_count") is not None or bool(outputs)
        failed = _cell_failed(outputs) or not ran
        message = _failure_message(outputs) if ran else "the cell did not run"
        result.tests.append(CellResult(meta.get("grade_id", "?"), float(meta.get("points", 0)),
                                       not failed, message if failed else "", _stdout(outputs),
                                       index))
    return result
