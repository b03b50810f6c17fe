"""The clean room's own parts (`lesson.course.grading.cleanroom`), each on inputs made in the
test, without a sandbox: which cells are tests, context and answers; an answer that cannot
compile; an instructor cell's outputs; a student's exception rebuilt for the tests; an
argument's in-place changes copied back; the outputs filled into the notebook; and the caller's
side (`grade_notebook`, the memory check, the trusted process from the zygote or a new
interpreter) with the trusted process replaced. The sandboxed runs are
tests/test_grading_zygote.py's and the graded class's (slow)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
from contextlib import contextmanager
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from lesson.course.grading import cleanroom, wire, zygote
from lesson.course.grading.cleanroom import (BudgetSpent, Verdicts, _apply_state, _error_output,
                                             _fill, _rebuild_error, _run_trusted_cell,
                                             _syntax_output, classify, syntax_error)
from lesson.course.grading.sandbox import Limits, MemoryTooLow


# -- which cell is what ----------------------------------------------------------------------
def _cell(source, cell_type="code", **nbgrader):
    meta = {"nbgrader": nbgrader} if nbgrader else {}
    return {"cell_type": cell_type, "source": source, "metadata": meta, "id": None}


def test_cells_are_tests_context_or_answers_and_markdown_is_left_out():
    nb = {"cells": [
        _cell("# Title", cell_type="markdown"),
        _cell("x = 1", solution=True, grade_id="answer_1"),
        _cell("assert x == 1", grade=True, locked=True, grade_id="test_1"),
        _cell("import torch", locked=True, grade_id="setup"),
        _cell(["y = ", "2"]),                                     # a student's own cell
        _cell("z = 3", solution=True, grade=True, grade_id="graded_answer"),
    ]}
    nb["cells"][4]["id"] = "abc"
    got = [(c["index"], c["kind"], c["label"], c["source"]) for c in classify(nb)]
    assert got == [(1, "answer", "answer_1", "x = 1"), (2, "test", "test_1", "assert x == 1"),
                   (3, "context", "setup", "import torch"), (4, "answer", "abc", "y = 2"),
                   (5, "answer", "graded_answer", "z = 3")]


def test_a_cell_without_grade_id_or_id_is_labelled_by_its_index():
    nb = {"cells": [_cell("a = 1", cell_type="markdown"), _cell("b = 2")]}
    assert classify(nb)[0]["label"] == "cell-1"


# -- an answer that cannot compile ------------------------------------------------------------
def test_a_syntax_error_is_found_without_running_the_cell():
    assert syntax_error("x = 1\nprint(x)", "a1") is None
    assert syntax_error("import os; os._exit(3)", "a1") is None      # compiled, never run
    err = syntax_error("x = 1\ny = (", "a1")
    assert isinstance(err, SyntaxError) and err.lineno == 2
    assert isinstance(syntax_error("return 5", "a1"), SyntaxError)     # outside a function
    assert isinstance(syntax_error("if True:\nx = 1", "a1"), IndentationError)


def test_source_compile_refuses_otherwise_is_a_syntax_error_at_line_one(monkeypatch):
    for source in ("x = '\0'\n", "(" * 10_000 + ")" * 10_000):   # NUL bytes, absurd nesting
        err = syntax_error(source, "a1")
        assert isinstance(err, SyntaxError) and err.msg
    for refusal in (ValueError("source code cannot contain null bytes"), RecursionError(),
                    MemoryError()):
        def refuse(*args, **kwargs):
            raise refusal
        monkeypatch.setattr(cleanroom, "compile", refuse, raising=False)
        err = syntax_error("x = 1", "a1")
        assert isinstance(err, SyntaxError) and err.lineno == 1
        assert err.msg == (str(refusal) or type(refusal).__name__)


def test_a_syntax_error_reads_as_the_answer_cell_and_its_line():
    out = _syntax_output(syntax_error("x = 1\ny = (", "a1"), "a1")
    assert out["output_type"] == "error" and out["ename"] == "SyntaxError"
    assert out["evalue"].startswith("line 2 of answer cell a1: ")
    assert "<cell a1>" in out["traceback"][0]
    bare = SyntaxError("bad")
    assert _syntax_output(bare, "a2")["evalue"] == "answer cell a2: bad"


def test_the_budget_message_says_how_much_time_the_students_code_had():
    assert str(BudgetSpent(3.5)) == ("the notebook's time budget (3.5 s for the student's "
                                     "code) is spent")


# -- an instructor cell, run in the trusted namespace ----------------------------------------
def test_a_trusted_cell_gives_its_prints_and_its_last_value():
    ns: dict = {}
    outputs, error = _run_trusted_cell("import sys\nprint('hi')\nprint('err', file=sys.stderr)"
                                       "\nx = 2\nx * 21", "t1", ns)
    assert error is None and ns["x"] == 2
    assert outputs == [{"output_type": "stream", "name": "stdout", "text": "hi\n"},
                       {"output_type": "stream", "name": "stderr", "text": "err\n"},
                       {"output_type": "execute_result", "execution_count": None,
                        "metadata": {}, "data": {"text/plain": "42"}}]
    assert _run_trusted_cell("x = 3", "t1", ns) == ([], None) and ns["x"] == 3
    assert _run_trusted_cell("None", "t1", ns) == ([], None)            # None shows nothing
    assert _run_trusted_cell("", "t1", ns) == ([], None)


def test_a_failing_trusted_cell_gives_its_error_and_keeps_what_it_printed():
    outputs, error = _run_trusted_cell("print('before')\nassert 1 == 2, 'no'", "t1", {})
    assert isinstance(error, AssertionError)
    assert outputs[0]["text"] == "before\n"
    assert outputs[-1]["ename"] == "AssertionError" and outputs[-1]["evalue"] == "no"
    outputs, error = _run_trusted_cell("raise SystemExit(0)", "t1", {})
    assert isinstance(error, SystemExit) and outputs[-1]["ename"] == "SystemExit"
    _, error = _run_trusted_cell("x = (", "t1", {})
    assert isinstance(error, SyntaxError)


def test_the_graders_frames_are_left_out_of_an_error():
    try:
        exec(compile("def f():\n    raise ValueError('bad')\nf()", "<answer a1>", "exec"), {})
    except ValueError as exc:
        out = _error_output(exc)
    assert (out["ename"], out["evalue"]) == ("ValueError", "bad")
    assert not any(line.lstrip().startswith('File "<answer ') or "lesson/course/grading" in line
                   for line in out["traceback"])
    assert any(line.lstrip().startswith('File "') for line in out["traceback"])
    assert out["traceback"][-1] == "ValueError: bad\n"

    def ping(n):                                          # two alternating frames: no
        if n == 0:                                        # "previous line repeated" folding
            raise KeyError("k")
        pong(n - 1)

    def pong(n):
        ping(n - 1)
    try:
        ping(60)
    except KeyError as exc:
        tail = _error_output(exc)["traceback"]
        assert len(tail) == 30 and tail[-1] == "KeyError: 'k'\n"


# -- the student's exception, rebuilt ---------------------------------------------------------
def test_a_students_exception_keeps_its_built_in_family_its_message_and_traceback():
    exc = _rebuild_error({"type": "ShapeError", "bases": ["ShapeError", "ValueError", "Exception"],
                          "message": "wrong shape", "traceback": "line 3"}, "model")
    assert type(exc) is ValueError and str(exc) == "wrong shape"
    assert exc.__notes__ == ["in your model:\nline 3"]
    key = _rebuild_error({"type": "KeyError", "bases": ["KeyError", "LookupError"],
                          "message": "k"}, "f")
    assert type(key) is KeyError and not hasattr(key, "__notes__")


def test_an_exception_of_no_built_in_family_is_a_runtime_error_naming_its_type():
    for bases in (["Mine", "Exception"], ["BaseException"], ["object"], []):
        exc = _rebuild_error({"type": "Mine", "bases": bases, "message": "m"}, "f")
        assert type(exc) is RuntimeError and str(exc) == "Mine: m"
    exit_ = _rebuild_error({"type": "SystemExit", "bases": ["SystemExit"], "message": "0"}, "f")
    assert type(exit_) is RuntimeError                    # never an exit in the grader


# -- an argument's in-place changes, copied back ----------------------------------------------
def test_a_modules_new_weights_are_loaded_back():
    model = torch.nn.Linear(2, 1)
    new = {k: torch.full_like(v, 7.0) for k, v in model.state_dict().items()}
    _apply_state(model, {"module": new})
    assert all(torch.equal(v, torch.full_like(v, 7.0)) for v in model.state_dict().values())


def test_a_tensor_is_copied_back_only_at_its_own_shape():
    t = torch.zeros(3)
    _apply_state(t, {"tensor": torch.ones(3)})
    assert torch.equal(t, torch.ones(3))
    _apply_state(t, {"tensor": torch.full((4,), 5.0)})
    assert torch.equal(t, torch.ones(3))
    _apply_state(t, {"module": {}})                       # a kind that is not its own
    _apply_state(t, None)
    _apply_state(t, {})
    assert torch.equal(t, torch.ones(3))


def test_arrays_lists_and_dicts_are_copied_back_in_place():
    a = np.zeros(2)
    _apply_state(a, {"ndarray": wire.encode(np.array([1.0, 2.0]))})
    assert a.tolist() == [1.0, 2.0]
    _apply_state(a, {"ndarray": wire.encode(np.array([1.0, 2.0, 3.0]))})   # another shape
    assert a.tolist() == [1.0, 2.0]
    items = [1, 2]
    same = items
    _apply_state(items, {"list": wire.encode([3])})
    assert same == [3]
    d = {"a": 1}
    _apply_state(d, {"dict": wire.encode({"b": 2})})
    assert d == {"b": 2}
    _apply_state(d, {"list": wire.encode([1])})           # a list's state on a dict: nothing
    assert d == {"b": 2}


# -- the outputs, into the notebook -----------------------------------------------------------
def test_outputs_are_filled_and_numbered_and_a_test_never_run_scores_zero():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"),
                                         nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("x")])
    nb.cells[2].metadata["nbgrader"] = {"grade": True, "locked": True, "grade_id": "t1"}
    cells = classify(nb)
    result = {"output_type": "execute_result", "execution_count": None, "metadata": {},
              "data": {"text/plain": "1"}}
    _fill(nb, cells, Verdicts(outputs={2: [result]}))
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count == 1
    assert nb.cells[2].execution_count == 2 and nb.cells[2].outputs[0].execution_count == 2
    _fill(nb, cells, Verdicts(error="the sandbox died"))
    err = nb.cells[2].outputs[0]
    assert (err.ename, err.evalue) == ("GraderError", "the sandbox died")
    assert nb.cells[1].outputs == []
    _fill(nb, cells, Verdicts())
    assert nb.cells[2].outputs[0].evalue == "not run"
    nbformat.validate(nb)


def test_the_retry_after_a_timeout_is_bounded():
    assert cleanroom.RETRY_FACTOR == 10.0 and cleanroom.RETRY_FLOOR_S == 5.0


# -- the caller's side: grade_notebook, with the trusted process replaced -----------------------


def _notebook() -> nbformat.NotebookNode:
    """A context cell, an answer and a test."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import math"),
                                         nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("assert x == 1")])
    nb.cells[0].metadata["nbgrader"] = {"locked": True, "grade_id": "setup"}
    nb.cells[1].metadata["nbgrader"] = {"solution": True, "grade_id": "answer"}
    nb.cells[2].metadata["nbgrader"] = {"grade": True, "locked": True, "grade_id": "t1"}
    return nb


@pytest.fixture()
def trusted(monkeypatch) -> dict:
    """The trusted process replaced: what it was given; `seen["end"]` says how it ends."""
    seen: dict = {"end": "ok"}
    monkeypatch.setattr(cleanroom, "check_memory", lambda mb: seen.update(memory=mb))

    def run(job, result, limits, deny, private, budget):
        seen.update(job=json.loads(job.read_text()), deny=deny, budget=budget, private=private,
                    mode=stat.S_IMODE(os.stat(private).st_mode))
        if seen["end"] == "ok":
            result.write_text(json.dumps({
                "outputs": {"2": [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]},
                "tampering": {"answer": ["edited a test"]}, "notes": ["a note"],
                "failed": {"t1": "why"}, "spent": 1.25, "unrun": {"answer": "SyntaxError"}}))
            return 0, "the log"
        if seen["end"] == "no result":
            return 0, "the log"
        return (None if seen["end"] == "timeout" else 7), "x" * 3000 + "the log's end"

    monkeypatch.setattr(cleanroom, "_trusted_process", run)
    return seen


def test_the_trusted_process_gets_a_private_folder_the_cells_and_a_budget(trusted, tmp_path):
    verdicts = cleanroom.grade_notebook(_notebook(), Limits(timeout_s=10, memory_mb=2000),
                                        deny=[str(tmp_path / "course" / "..")])
    assert trusted["memory"] == 2000 and trusted["mode"] == 0o700
    assert trusted["budget"] == 120 + 10 * (2 + 2)          # the answer and the test count
    job = trusted["job"]
    assert job["dump_after"] == 155 and job["limits"]["timeout_s"] == 10
    assert [c["kind"] for c in job["cells"]] == ["context", "answer", "test"]
    assert trusted["deny"] == job["deny"] == [str(tmp_path), str(trusted["private"])]
    assert not trusted["private"].exists()                  # removed after
    assert verdicts.error is None and verdicts.outputs == {2: [
        {"output_type": "stream", "name": "stdout", "text": "ok\n"}]}
    assert (verdicts.tampering, verdicts.failed, verdicts.spent, verdicts.unrun) == (
        {"answer": ["edited a test"]}, {"t1": "why"}, 1.25, {"answer": "SyntaxError"})
    assert verdicts.notes[0] == "a note" and verdicts.notes[-1].startswith("clean room: ")


@pytest.mark.parametrize("end,message", [
    ("timeout", "the clean room ran past 180 s: "),
    ("crash", "the clean room failed (7): "),
    ("no result", "the clean room failed (0): the log"),
])
def test_a_trusted_process_that_fails_leaves_every_test_at_zero_with_the_reason(
        trusted, end, message):
    trusted["end"] = end
    nb = _notebook()
    verdicts = cleanroom.grade_notebook(nb, Limits(timeout_s=15))
    assert verdicts.error.startswith(message) and verdicts.outputs == {}
    if end != "no result":
        assert verdicts.error.endswith("the log's end") and len(verdicts.error) < 2100
    assert nb.cells[2].outputs[0].ename == "GraderError"
    assert nb.cells[2].outputs[0].evalue == verdicts.error
    assert not trusted["private"].exists()


def test_the_memory_check_compares_with_the_zygotes_address_space(monkeypatch):
    monkeypatch.setattr(zygote, "ENABLED", True)
    monkeypatch.setattr(zygote, "prewarm", lambda: 1000.0)
    cleanroom.check_memory(1536)                            # exactly the floor
    with pytest.raises(MemoryTooLow, match="at least 1536 MB"):
        cleanroom.check_memory(1535)

    def gone():
        raise zygote.ZygoteGone("no zygote")

    monkeypatch.setattr(zygote, "prewarm", gone)
    cleanroom.check_memory(10)                              # nothing to measure: no refusal
    monkeypatch.setattr(zygote, "ENABLED", False)
    monkeypatch.setattr(zygote, "prewarm", lambda: pytest.fail("no zygote to ask"))
    cleanroom.check_memory(10)


class _FakeZygote:
    def __init__(self, code, log_text):
        self.code, self.log_text, self.asked = code, log_text, None

    def run(self, target, kwargs, *, cwd, log, timeout):
        self.asked = (target, kwargs, cwd, timeout)
        if self.log_text is not None:
            log.write_text(self.log_text)
        return self.code


def test_the_trusted_process_is_forked_from_the_zygote_with_its_log(monkeypatch, tmp_path):
    fake = _FakeZygote(0, "trusted output")

    @contextmanager
    def pool():
        yield fake

    monkeypatch.setattr(zygote, "ENABLED", True)
    monkeypatch.setattr(zygote, "zygote", pool)
    job, result = tmp_path / "job.json", tmp_path / "result.json"
    limits = Limits(timeout_s=3)
    got = cleanroom._trusted_process(job, result, limits, ["/d"], tmp_path, 99.0)
    assert got == (0, "trusted output")
    target, kwargs, cwd, timeout = fake.asked
    assert target == "lesson.course.grading.cleanroom:trusted_main" and cwd == tmp_path
    assert kwargs == {"job": str(job), "result": str(result), "limits": limits.__dict__,
                      "deny": ["/d"]} and timeout == 99.0
    (tmp_path / "trusted.log").unlink()
    fake.log_text, fake.code = None, None                   # past its budget, nothing logged
    assert cleanroom._trusted_process(job, result, limits, [], tmp_path, 1.0) == (None, "")


def test_without_a_zygote_the_trusted_process_is_a_new_interpreter(monkeypatch, tmp_path):
    @contextmanager
    def gone():
        raise zygote.ZygoteGone("it died")
        yield

    runs: list = []

    def run(args, **kw):
        runs.append((args, kw))
        if kw["timeout"] < 1:
            raise subprocess.TimeoutExpired(args, kw["timeout"])
        return subprocess.CompletedProcess(args, 3, stdout="", stderr="its stderr")

    monkeypatch.setattr(zygote, "ENABLED", True)
    monkeypatch.setattr(zygote, "zygote", gone)
    monkeypatch.setattr(cleanroom.subprocess, "run", run)
    result = tmp_path / "result.json"
    result.write_text("half written by the dead zygote's child")
    assert cleanroom._trusted_process(tmp_path / "job.json", result, Limits(), [], tmp_path,
                                      5.0) == (3, "its stderr")
    assert not result.exists()                              # nothing half-written is read
    args, kw = runs[0]
    assert args[:3] == [cleanroom.sys.executable, "-I", "-c"] and kw["cwd"] == tmp_path
    assert "trusted_main" in args[3] and kw["timeout"] == 5.0
    assert cleanroom._trusted_process(tmp_path / "job.json", result, Limits(), [], tmp_path,
                                      0.5) == (None, "")    # no result file to remove: fine
    monkeypatch.setattr(zygote, "ENABLED", False)
    assert cleanroom._trusted_process(tmp_path / "job.json", result, Limits(), [], tmp_path,
                                      5.0) == (3, "its stderr")


@pytest.mark.parametrize("plain", [
    ["not", "a", "record"],                                                  # TypeError
    {},                                                                      # KeyError
    {"optimizers": [], "seed": "x", "shrunk_steps": 1, "layers": {}},        # ValueError
    {"optimizers": [], "seed": None, "shrunk_steps": 1, "layers": 5},        # AttributeError
])
def test_a_broken_set_up_record_attaches_nothing(plain):
    from broken_models.case import Outcome

    outcome = Outcome(metrics={}, findings=[])
    cleanroom._attach_setup(outcome, wire.encode(plain))
    assert not hasattr(outcome, "_nndebug_setup")
    cleanroom._attach_setup(outcome, None)
    cleanroom._attach_setup({"not": "an outcome"}, wire.encode(plain))


# -- an answer cell that never finished ---------------------------------------------------------
class _Box:
    """A sandbox stand-in: its progress, and the requests a room sends it."""

    def __init__(self, workdir: Path, progress):
        self.workdir, self.progress, self.spent = workdir, progress, 0.0
        self.limits, self.sent = Limits(timeout_s=4), []

    def request(self, message, replay=False, timeout=None, budget=None):
        self.sent.append(message)
        return {"names": {}, "tampering": [], "stdout": "", "stderr": ""}


def test_a_cell_interrupted_before_its_first_statement_ended_keeps_nothing(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(cleanroom.tempfile, "tempdir", None)
    for progress in (None, 0):
        box = _Box(tmp_path, progress)
        room = cleanroom.Room(Limits(), [], sandbox=box)
        cell = {"label": "a1", "source": "x = 1\nwhile True: pass\n"}
        out = room._ended(cell, ["x"], set(), cleanroom.TimedOut("late"))
        assert box.sent == []                               # nothing to run again
        assert [(o["ename"], o["evalue"]) for o in out] == [
            ("TimeoutError", "cell a1 ran past the time limit (4 s, interrupted)")]


class _SlowBox(_Box):
    """A sandbox whose every request runs past its time, using up `cost` of the budget."""

    def __init__(self, workdir: Path, budget, spent=0.0, cost=0.0):
        super().__init__(workdir, None)
        self.limits = Limits(timeout_s=4, budget_s=budget)
        self.spent, self.cost = spent, cost

    def request(self, message, replay=False, timeout=None, budget=None):
        self.sent.append((message, budget))
        self.spent += self.cost
        raise cleanroom.TimedOut("late")


def test_a_request_past_its_time_is_a_spent_budget_only_when_the_budget_is(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(cleanroom.tempfile, "tempdir", None)

    def ask(budget, spent=0.0, cost=0.0):
        box = _SlowBox(tmp_path, budget, spent, cost)
        room = cleanroom.Room(Limits(), [], sandbox=box)
        with pytest.raises(cleanroom.TimedOut) as caught:
            room.request(("call",))
        return caught.value, box.sent

    exc, sent = ask(None)                                   # no budget: a plain time-out
    assert not isinstance(exc, BudgetSpent) and sent == [(("call",), None)]
    exc, sent = ask(10.0, cost=9.96)                        # 0.04 s left after it: spent
    assert isinstance(exc, BudgetSpent) and sent == [(("call",), 10.0)]
    exc, _ = ask(10.0, cost=9.94)                           # 0.06 s left: only this call
    assert not isinstance(exc, BudgetSpent)
    exc, sent = ask(10.0, spent=10.0)                       # nothing left: never sent
    assert isinstance(exc, BudgetSpent) and sent == []
    exc, sent = ask(10.0, spent=4.0)
    assert sent == [(("call",), 6.0)]                       # the request gets what is left
