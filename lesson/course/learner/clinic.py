"""What a clinic notebook needs from a catalogue case: its card and script, and a guard that
a repair fixed the bug rather than the diagnostics.

A case's training function returns its own metrics and findings, so a "repair" could simply
stop measuring (drop the validator's findings, skip the debugger). `harness_changes` compares
the repair's source with the broken script: every line that measures or reports (the
debugger, the tool named by the case, the metrics) must still be there, word for word. A repair
could also hide the symptom around the bug (a lower learning rate keeps an unsafe `log` from
meeting a zero; fewer steps end before the NaN): `setup_changes` holds the set-up the case's
own fix leaves alone (each optimizer's learning rate, each loop's range) to the same rule,
however the repair writes it.
"""
from __future__ import annotations

import __future__
import ast
import importlib
import inspect
import linecache
import re
import sys
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from broken_models.script import case_script, page_imports
from lesson.course.learner.clinics import find_clinic_case

#: a line of a case script that measures or reports, rather than trains
_HARNESS = re.compile(
    r"NetworkDebugger|debugger\.|findings|Outcome\(|metrics|scores\(|locate_nonfinite|"
    r"validate_data|check_labels_carry_signal|find_label_issues|gradient_check|"
    r"overfit_one_batch|find_learning_rate|check_batch_independence|preflight")
#: torch's optimizers, by class name
_OPTIMIZERS = frozenset(name for name, obj in vars(torch.optim).items()
                        if isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer))


def _case(label: str) -> Any:
    """The catalogue case behind a clinic label ("case1_3") or a case name."""
    return find_clinic_case(label).case


def _module(label: str) -> Any:
    return importlib.import_module(_case(label).module)


def show_case(label: str, into: dict[str, Any] | None = None) -> None:
    """Print a case's symptom and target, then its broken training script under the case's
    neutral label (never the name or title: they name the bug) with every helper it uses: the
    page's own, and the shared ones from the catalogue's modules (in one namespace, only the
    first time). With `into` (the notebook's `globals()`), also define the script there as
    `broken_<label>`, with its helpers and imports, compiled from the printed text under the
    file name `<label>.py`, so that `inspect` and `??` show that text and no file or module
    name of the catalogue's (they name the bug)."""
    found = find_clinic_case(label)
    case = found.case
    script = case_script(case, "broken", found.broken)
    print(f"{found.heading}\nsymptom: {case.symptom}")
    print(f"target:  {case.target}\n")
    shown = _SHOWN.setdefault(id(into), set()) if into is not None else set()
    print(script.text)
    for module, source in script.shared:
        if (module, source) in shown:
            print(f"# (the helpers it imports from {module} are printed above)")
            continue
        shown.add((module, source))
        print(f"# ---- from {module} (the course's shared helpers) ----\n\n{source}\n")
    if into is not None:
        into.update(define_script(found.ident, script))
        for name, value in page_imports(case).items():
            into.setdefault(name, value)


#: id(namespace) -> the shared helpers show_case has printed for it already
_SHOWN: dict[int, set[tuple[str, str]]] = {}


def define_script(ident: str, script: Any) -> dict[str, Any]:
    """Run a case's script text as the module `<ident>` from the file `<ident>.py` (kept in
    `linecache` and `sys.modules`, where `inspect` looks for a function's or a class's source):
    its namespace, without the module's own dunder names."""
    filename, text = f"{ident}.py", script.text
    module = types.ModuleType(ident)
    module.__file__ = filename
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    sys.modules[ident] = module
    exec(compile(text, filename, "exec"), module.__dict__)
    return {k: v for k, v in vars(module).items()
            if not k.startswith("__") and not isinstance(v, __future__._Feature)}


def evaluate_repair(label: str, repair: Callable[..., Any], seed: int) -> Any:
    """Train the student's repair exactly as the catalogue trains its own fix, and judge it
    (`run.healthy`: no finding and the target reached)."""
    return _case(label).evaluate(repair, seed=seed)


#: ways of handing a loss to the debugger that measure the same thing (README recommends
#: `.detach()`, which keeps the value on the device; `.item()` copies it to the host)
_SAME_LOSS = re.compile(r"record_(val_)?loss\((\w+)\.(?:item|detach)\(\)\)")


def _normalised(line: str) -> str:
    return _SAME_LOSS.sub(lambda m: f"record_{m.group(1) or ''}loss({m.group(2)})", line.strip())


@dataclass(frozen=True)
class DiagnosisVerdict:
    """How a diagnosis relates to the case's bug, in words a student can act on."""

    kind: str      # "cause", "consequence", "unrelated", "not a code" or "missing"
    message: str

    @property
    def right(self) -> bool:
        return self.kind == "cause"


def judge_diagnosis(label: str, code: Any) -> DiagnosisVerdict:
    """Grade a diagnosis as the cause: any code the case page lists in CAUSES is right (and the
    verdict then names the case); one in CONSEQUENCES is wrong, and the verdict says it is a
    consequence, without naming the cause."""
    from lesson.findings import CODES

    found = find_clinic_case(label)
    case = found.case
    if code is None:
        return DiagnosisVerdict("missing", f'set diagnosis["{found.ident}"] to a code from '
                                "lesson.CODES")
    if not isinstance(code, str) or code not in CODES:
        return DiagnosisVerdict("not a code", f"{code!r} is not a code of lesson.CODES "
                                "(a code is a string in quotes, such as \"NAN_OR_INF\")")
    if code in case.causes:
        return DiagnosisVerdict("cause", f"{code} names the cause. Solved: {found.solved_line}")
    if code in case.consequences:
        return DiagnosisVerdict("consequence", f"{code} is true of this run, but it is a "
                                "consequence of the bug, not its cause: what produced it?")
    return DiagnosisVerdict("unrelated", f"{code} is not what is wrong in this script: "
                            "read the evidence again (which finding explains the others?)")


def harness_lines(source: str) -> list[str]:
    """The stripped lines of a script that measure or report."""
    return [ln.strip() for ln in source.splitlines() if _HARNESS.search(ln)]


def _missing(repair: Callable[..., Any], lines: list[str]) -> list[str]:
    """Which of `lines` the repair's source lacks (compared as `_normalised`)."""
    try:
        source = inspect.getsource(repair)
    except (OSError, TypeError) as exc:
        return [f"cannot read the repair's source: {exc}"]
    mine = {_normalised(ln) for ln in source.splitlines()}
    return [ln for ln in lines if _normalised(ln) not in mine]


def harness_changes(label: str, repair: Callable[..., Any]) -> list[str]:
    """What the repair changed in the case's measuring code ([] when nothing): lines of the
    broken script's harness missing from the repair, or the catalogue's own function."""
    case, module = _case(label), _module(label)
    if repair in (case.train_broken, case.train_fixed):
        return ["this is the catalogue's own script, not a repair"]
    return _missing(repair, harness_lines(inspect.getsource(module.train_broken)))


def _literal(node: ast.expr) -> str:
    """A number as its value (`5e-2` is `0.05`), anything else as written."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return ast.unparse(node)
    return str(value) if isinstance(value, int) else repr(float(value))


def training_setup(source: str) -> set[str]:
    """The set-up a training script fixes: each optimizer's learning rate (`Adam(lr=0.05)`,
    however the call is written) and each loop's range (`range(100)`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func).rpartition(".")[2]
            if name in _OPTIMIZERS:
                lr = next((k.value for k in node.keywords if k.arg == "lr"),
                          node.args[1] if len(node.args) > 1 else None)
                if lr is not None:
                    found.add(f"{name}(lr={_literal(lr)})")
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
                and ast.unparse(node.iter.func) == "range":
            found.add(f"range({', '.join(_literal(a) for a in node.iter.args)})")
    return found


#: causes whose fix may change part of the set-up its own fix keeps: stopping early (fewer
#: steps) is a fix for overfitting
_FREE_SETUP = {"OVERFITTING": "range("}


def setup_kept(label: str) -> set[str]:
    """The set-up of a case's broken script that its own fix keeps: the bug is not in it."""
    case, module = _case(label), _module(label)
    kept = (training_setup(inspect.getsource(module.train_broken))
            & training_setup(inspect.getsource(module.train_fixed)))
    free = tuple(_FREE_SETUP[c] for c in case.causes if c in _FREE_SETUP)
    return {item for item in kept if not item.startswith(free)} if free else kept


def setup_changes(label: str, repair: Callable[..., Any]) -> list[str]:
    """The set-up the repair changed though the bug is not in it ([] when none), each as
    "keep ...": a lower learning rate or fewer steps can hide a symptom, not fix its cause."""
    case = _case(label)
    if repair in (case.train_broken, case.train_fixed):
        return []
    try:
        mine = training_setup(inspect.getsource(repair))
    except (OSError, TypeError, SyntaxError) as exc:
        return [f"cannot read the repair's source: {exc}"]
    return [f"keep {item}" for item in sorted(setup_kept(label) - mine)]
