"""Verdicts computed where the student cannot reach: the clean room.

`grade_notebook(nb)` runs a (sanitized) submission the way nbgrader's Execute would, but split
over two fresh processes:

- the *trusted* process (`python -I`, nothing of the notebook imported; forked from the grading
  process's warm zygote, `zygote.py`, where it has one) runs the instructor's cells: the locked
  set-up cells and every test cell, hidden tests included;
- the student's sandbox (`sandbox.py`) runs the answer cells and every call of a student
  function. What an answer cell binds at its top level crosses back as plain data (`wire.py`)
  or as a stand-in function that calls into the sandbox; nothing else crosses. A name the
  tests themselves bind (a helper, an import, `harness_changes`) stays the tests' own, except
  plain data they set up for the answers to fill in (`diagnosis`).

An answer cell whose code reaches into the grader (`answers.tampering`, a clinic repair that
adds lines touching the measuring code, or what the sandbox's guard caught at run time) is
refused: its names raise `Tampering`, so the tests that use them score 0, and the cell's
output says why. Every test cell gets the outputs it produced in the trusted process, in
nbgrader's format, so nbgrader's own scoring (`determine_grade`) reads them unchanged.
"""
from __future__ import annotations

import ast
import builtins
import io
import json
import linecache
import os
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .answers import answers, bound_names, imported_names, top_level_names
from .sandbox import Limits, SandboxDied, TimedOut, _code_roots

TAMPERING = "Tampering"


class Tampering(Exception):
    """A test used an answer that reached into the grader."""


@dataclass
class Verdicts:
    """The clean room's result for one notebook: outputs per code cell (by index) and the
    tampering it caught (answer cell label -> reasons)."""

    outputs: dict[int, list[dict]] = field(default_factory=dict)
    tampering: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)   # test cell -> why it scored 0
    error: str | None = None                               # the clean room itself failed


def classify(nb: Any) -> list[dict]:
    """The notebook's code cells as (index, kind, label, source): kind is `test` (graded,
    locked), `context` (the instructor's other locked cells) or `answer` (everything the
    student wrote, added cells included)."""
    cells = []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            kind = "answer"
        elif meta.get("grade"):
            kind = "test"
        elif meta.get("locked"):
            kind = "context"
        else:
            kind = "answer"
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        cells.append({"index": index, "kind": kind, "source": source,
                      "label": meta.get("grade_id") or cell.get("id") or f"cell-{index}"})
    return cells


# -- the trusted process -----------------------------------------------------------------

def _stream(name: str, text: str) -> list[dict]:
    return [{"output_type": "stream", "name": name, "text": text}] if text else []


def _error_output(exc: BaseException) -> dict:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    frames = [ln for ln in lines if "lesson/course/grading" not in ln]
    return {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
            "traceback": frames[-30:]}


def _run_trusted_cell(source: str, label: str, ns: dict) -> tuple[list[dict], BaseException | None]:
    """Run an instructor cell in the trusted namespace; nbgrader-style outputs."""
    out, err = io.StringIO(), io.StringIO()
    result, error = None, None
    try:
        tree = ast.parse(source, filename=f"<test {label}>")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with redirect_stdout(out), redirect_stderr(err):
            exec(compile(tree, f"<test {label}>", "exec"), ns)
            if last is not None:
                result = eval(compile(ast.Expression(last.value), f"<test {label}>", "eval"), ns)
    except BaseException as exc:                  # SystemExit too: the cell fails
        error = exc
    outputs = _stream("stdout", out.getvalue()) + _stream("stderr", err.getvalue())
    if error is None and result is not None:
        outputs.append({"output_type": "execute_result", "execution_count": None,
                        "metadata": {}, "data": {"text/plain": repr(result)}})
    if error is not None:
        outputs.append(_error_output(error))
    return outputs, error


def _rebuild_error(err: dict, name: str) -> BaseException:
    """The student's exception as a built-in exception of the same family (so `except
    ValueError` in a test still works), carrying its message and traceback as text."""
    for base in err.get("bases", []):
        cls = getattr(builtins, base, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception:
            exc = cls(err["message"])
            break
    else:
        exc = RuntimeError(f"{err['type']}: {err['message']}")
    if err.get("traceback"):
        exc.add_note(f"in your {name}:\n{err['traceback']}")
    return exc


def _apply_state(obj: Any, state: Any) -> None:
    """Copy the child's in-place changes of an argument back onto the grader's object."""
    import torch

    from . import wire

    if not state:
        return
    (kind, value), = state.items()
    with torch.no_grad():
        if kind == "module" and isinstance(obj, torch.nn.Module):
            obj.load_state_dict({k: v for k, v in value.items()})
        elif kind == "tensor" and isinstance(obj, torch.Tensor) and value.shape == obj.shape:
            obj.copy_(value)
        elif kind == "ndarray" and hasattr(obj, "shape"):
            new = wire.decode(value)
            if new.shape == obj.shape:
                obj[...] = new
        elif kind == "list" and isinstance(obj, list):
            obj[:] = wire.decode(value)
        elif kind == "dict" and isinstance(obj, dict):
            new = wire.decode(value)
            obj.clear()
            obj.update(new)


class Room:
    """The trusted side of one notebook: its namespace, the sandbox, what was caught."""

    def __init__(self, limits: Limits, deny: list[str], sandbox: Any = None):
        from .sandbox import Sandbox

        if sandbox is None:
            sandbox = Sandbox(limits=limits, deny=deny)
            sandbox.start()
        self.sandbox = sandbox
        tempfile.tempdir = str(self.sandbox.workdir)     # the tests' files: readable by both
        self.ns: dict[str, Any] = {"__name__": "__main__"}
        self.tampering: dict[str, list[str]] = {}
        self.caught: list[str] = []                       # during the current test cell
        self.notes: list[str] = []

    def _record(self, label: str, reasons: list[str]) -> None:
        self.tampering.setdefault(label, [])
        self.tampering[label] += [r for r in reasons if r not in self.tampering[label]]
        self.caught += reasons

    def request(self, message: tuple, replay: bool = False) -> dict:
        return self.sandbox.request(message, replay=replay)

    def _refused(self, name: str, label: str, reasons: list[str]):
        room = self

        def refused(*args, **kwargs):
            room.caught.append(f"{name} was refused")
            raise Tampering(f"{name} (answer cell {label}) was refused: " + "; ".join(reasons))
        refused.__name__ = name
        return refused

    def _proxy(self, name: str, label: str, source: str):
        """A function standing for the student's `name`: calls run in the sandbox; its source
        (for `inspect.getsource`, which the clinics' harness check reads) is the student's."""
        room = self
        filename = f"<answer {label}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        first = 1
        try:
            for node in ast.parse(source).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and node.name == name:
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        except SyntaxError:
            pass

        def call(args: tuple, kwargs: dict) -> Any:
            from . import wire

            try:
                reply = room.request(("call", name, args, kwargs))
            except TimedOut:
                raise TimeoutError(f"{name} ran longer than {room.sandbox.limits.timeout_s:g} s "
                                   f"(interrupted)") from None
            except SandboxDied as exc:
                raise RuntimeError(f"{name}: {exc}") from None
            sys.stdout.write(reply.get("stdout", ""))
            sys.stderr.write(reply.get("stderr", ""))
            if reply.get("tampering"):
                room._record(label, reply["tampering"])
                raise Tampering(f"{name} reached into the grader: " + "; ".join(reply["tampering"]))
            for obj, state in zip(args, reply.get("args", [])):
                _apply_state(obj, state)
            for key, state in reply.get("kwargs", {}).items():
                _apply_state(kwargs[key], state)
            if not reply["ok"]:
                if reply["error"]["type"] == "MemoryError":
                    raise MemoryError(f"{name} ran out of memory (the sandbox's limit is "
                                      f"{room.sandbox.limits.memory_mb} MB)")
                raise _rebuild_error(reply["error"], name)
            result = wire.decode(reply["result"])
            _attach_setup(result, reply.get("setup"))
            return result

        stub_ns = {"__call": call}
        exec(f"def {name}(*args, **kwargs):\n    return __call(args, kwargs)\n", stub_ns)
        stub = stub_ns[name]
        stub.__code__ = stub.__code__.replace(co_filename=filename, co_firstlineno=first)
        stub.__module__ = "__main__"
        stub.__nndebug_answer__ = name
        return stub

    # the three kinds of cell
    def context(self, cell: dict) -> list[dict]:
        outputs, _ = _run_trusted_cell(cell["source"], cell["label"], self.ns)
        try:
            self.request(("cell", cell["source"], cell["label"], []), replay=True)
        except SandboxDied:
            pass
        return outputs

    def answer(self, cell: dict, instructor: set[str]) -> list[dict]:
        from . import wire

        label, source = cell["label"], cell["source"]
        offered = answers(source, instructor)
        reasons = offered.refused + clinic_harness_additions(source)
        if reasons:
            self._record(label, reasons)
            for name in offered.names:
                if name not in instructor:
                    self.ns[name] = self._refused(name, label, reasons)
            return [{"output_type": "stream", "name": "stdout",
                     "text": "[grader] this cell reaches into the grader and was not run: "
                             + "; ".join(reasons) + "\n"}]
        try:
            reply = self.request(("cell", source, label, offered.names), replay=True)
        except TimedOut:
            return [_error_output(TimeoutError(f"cell {label} ran past the time limit"))]
        except SandboxDied as exc:
            return [_error_output(RuntimeError(f"cell {label}: {exc}"))]
        outputs = _stream("stdout", reply["stdout"]) + _stream("stderr", reply["stderr"])
        if reply.get("tampering"):
            self._record(label, reply["tampering"])
            for name in offered.names:
                if name not in instructor:
                    self.ns[name] = self._refused(name, label, reply["tampering"])
            return outputs + [{"output_type": "stream", "name": "stdout",
                               "text": "[grader] refused: " + "; ".join(reply["tampering"]) + "\n"}]
        imported = imported_names(source)
        for name, offer in reply["names"].items():
            if name in instructor:
                current = self.ns.get(name)
                if offer["kind"] == "data" and type(current) in (dict, list):
                    value = wire.decode(offer["value"])
                    if type(value) is type(current):
                        self.ns[name] = value
                        continue
                if name not in imported:           # `import numpy as np` again is harmless
                    self._record(label, [f"rebinds {name}, a name the tests use (the tests "
                                         f"keep their own)"])
                continue
            if offer["kind"] == "callable":
                self.ns[name] = self._proxy(name, label, source)
            elif offer["kind"] == "data":
                self.ns[name] = wire.decode(offer["value"])
            elif offer["kind"] == "module":
                self.ns[name] = _trusted_import(offer["module"])
        if not reply["ok"]:
            if reply["error"]["type"] == "MemoryError":
                reply["error"]["message"] = (f"cell {label} ran out of memory (the sandbox's "
                                             f"limit is {self.sandbox.limits.memory_mb} MB)")
            outputs.append({"output_type": "error", "ename": reply["error"]["type"],
                            "evalue": reply["error"]["message"],
                            "traceback": [reply["error"]["traceback"]]})
        return outputs

    def test(self, cell: dict) -> tuple[list[dict], str | None]:
        self.caught = []
        outputs, error = _run_trusted_cell(cell["source"], cell["label"], self.ns)
        if self.caught:
            why = "; ".join(dict.fromkeys(self.caught))
            outputs = [o for o in outputs if o["output_type"] != "error"]
            evalue = f"0 points: an answer this test uses reached into the grader ({why})"
            outputs.append({"output_type": "error", "ename": TAMPERING, "evalue": evalue,
                            "traceback": [f"{TAMPERING}: {evalue}"]})
            return outputs, f"tampering: {why}"
        if error is not None:
            return outputs, f"{type(error).__name__}: {error}"
        return outputs, None

    def close(self) -> None:
        self.sandbox.close()


def _attach_setup(result: Any, plain: Any) -> None:
    """Hand the set-up the sandbox recorded while a repair trained to the repair judgement
    (`lesson.course.learner.repair`), on the outcome it returned; the student's own code
    cannot set it (only plain metrics and findings cross from an Outcome)."""
    from broken_models.case import Outcome
    from lesson.course.learner.run_setup import RunSetup

    from . import wire

    if plain is None or not isinstance(result, Outcome):
        return
    try:
        result._nndebug_setup = RunSetup.from_plain(wire.decode(plain))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass                    # a broken record: the judgement then sees no set-up at all


def _trusted_import(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def clinic_harness_additions(source: str) -> list[str]:
    """For a clinic answer cell (one that binds `repaired_<case label>`), lines any function of
    the cell adds that touch the measuring code: keeping the broken script's harness lines is not
    enough if new ones rewrite it, and the repair may be bound from a function of another name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    from lesson.course.learner.clinic import harness_lines
    from lesson.course.learner.clinics import find_clinic_case

    labels = [name[len("repaired_"):] for name in top_level_names(tree)
              if name.startswith("repaired_")]
    cases = []
    for label in dict.fromkeys(labels):
        try:
            cases.append(find_clinic_case(label).case)
        except ValueError:
            continue
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    reasons = []
    for case in cases:
        allowed = set(harness_lines(case.source("broken")))
        for node in functions:
            mine = harness_lines(ast.get_source_segment(source, node) or "")
            added = [ln for ln in mine if ln not in allowed]
            if added:
                reasons.append(f"{node.name} adds lines that touch the measuring code: "
                               + " | ".join(added[:5]))
    return list(dict.fromkeys(reasons))


def run(cells: list[dict], limits: Limits, deny: list[str], sandbox: Any = None) -> dict:
    """The trusted process's work: every code cell in order; JSON-ready results."""
    room = Room(limits, deny, sandbox)
    instructor = set().union(*[bound_names(c["source"]) for c in cells
                               if c["kind"] != "answer"]) if cells else set()
    outputs: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    try:
        for cell in cells:
            if cell["kind"] == "context":
                outputs[str(cell["index"])] = room.context(cell)
            elif cell["kind"] == "answer":
                outputs[str(cell["index"])] = room.answer(cell, instructor)
            else:
                outputs[str(cell["index"])], why = room.test(cell)
                if why:
                    failed[cell["label"]] = why
    finally:
        room.close()
    return {"outputs": outputs, "tampering": room.tampering, "notes": room.notes,
            "failed": failed}


def trusted_main(job: str, result: str, limits: dict | None = None,
                 deny: list[str] | None = None) -> None:
    """Entry point of the trusted process: read the job file, write the result file. Forked
    from a zygote (`limits` and `deny` given), it forks the student's sandbox first, while
    it still holds nothing of the notebook."""
    import matplotlib
    matplotlib.use("Agg")
    import warnings

    warnings.filterwarnings("ignore")
    sandbox = None
    if limits is not None:
        from .sandbox import Sandbox

        sandbox = Sandbox(limits=Limits(**limits), deny=list(deny or []))
        sandbox.start(fork=True)
    spec = json.loads(Path(job).read_text())
    data = run(spec["cells"], Limits(**spec["limits"]), spec["deny"], sandbox)
    Path(result).write_text(json.dumps(data))


# -- the caller's side: nbgrader's preprocessor and `nndebug grade` use this ---------------

def grade_notebook(nb: Any, limits: Limits | None = None, deny: list[str] | None = None,
                   ) -> Verdicts:
    """Run one sanitized notebook through the clean room and put the outputs in its cells
    (in place). Returns what was found."""
    limits = limits or Limits()
    cells = classify(nb)
    private = Path(tempfile.mkdtemp(prefix="nndebug-trusted-"))
    os.chmod(private, 0o700)
    job, result = private / "job.json", private / "result.json"
    denied = [str(Path(d).resolve()) for d in (deny or [])] + [str(private)]
    job.write_text(json.dumps({"cells": cells, "limits": limits.__dict__, "deny": denied}))
    budget = 120 + limits.timeout_s * (2 + sum(c["kind"] != "context" for c in cells))
    verdicts = Verdicts()
    start = time.monotonic()
    code, log = _trusted_process(job, result, limits, denied, private, budget)
    if code is None:
        verdicts.error = f"the clean room ran past {budget:.0f} s"
    elif code != 0 or not result.is_file():
        verdicts.error = f"the clean room failed ({code}): {log[-2000:]}"
    if verdicts.error is None:
        data = json.loads(result.read_text())
        verdicts.outputs = {int(k): v for k, v in data["outputs"].items()}
        verdicts.tampering, verdicts.notes = data["tampering"], data["notes"]
        verdicts.failed = data["failed"]
    import shutil

    shutil.rmtree(private, ignore_errors=True)
    _fill(nb, cells, verdicts)
    verdicts.notes.append(f"clean room: {time.monotonic() - start:.1f} s")
    return verdicts


def _trusted_process(job: Path, result: Path, limits: Limits, deny: list[str], private: Path,
                     budget: float) -> tuple[int | None, str]:
    """Run the trusted process to its end: forked from this process's warm zygote, or (where
    there is none) a new `python -I`. Its exit code (None past `budget`) and its output."""
    from . import zygote

    if zygote.ENABLED:
        log = private / "trusted.log"
        try:
            with zygote.zygote() as z:
                code = z.run("lesson.course.grading.cleanroom:trusted_main",
                             {"job": str(job), "result": str(result),
                              "limits": limits.__dict__, "deny": deny},
                             cwd=private, log=log, timeout=budget)
            text = log.read_text(errors="replace") if log.is_file() else ""
            return code, text
        except zygote.ZygoteGone:
            result.unlink(missing_ok=True)
    boot = ("import sys; sys.path[:0] = %r; from lesson.course.grading import cleanroom; "
            "cleanroom.trusted_main(%r, %r)" % (_code_roots(), str(job), str(result)))
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", boot], env=zygote.clean_env(),
                              cwd=private, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        return None, ""
    return proc.returncode, proc.stderr


def _fill(nb: Any, cells: list[dict], verdicts: Verdicts) -> None:
    """Put the clean room's outputs into the notebook's code cells, nbgrader-style; when the
    clean room itself failed, every test cell gets that error (0 points, and the reason)."""
    import nbformat

    for count, cell in enumerate(cells, start=1):
        nb_cell = nb["cells"][cell["index"]]
        outputs = verdicts.outputs.get(cell["index"])
        if outputs is None:
            outputs = [] if cell["kind"] != "test" else [{
                "output_type": "error", "ename": "GraderError",
                "evalue": verdicts.error or "not run",
                "traceback": [f"GraderError: {verdicts.error or 'not run'}"]}]
        nb_cell["outputs"] = [nbformat.from_dict(o) for o in outputs]
        for o in nb_cell["outputs"]:
            if o["output_type"] == "execute_result":
                o["execution_count"] = count
        nb_cell["execution_count"] = count
