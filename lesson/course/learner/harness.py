"""The measuring code of a case script, and whether a repair kept it.

A case's training function returns its own metrics and findings, so a "repair" could simply
stop measuring (drop the validator's findings, skip the debugger). `harness_changes` compares
the repair's source with the broken script: every line that measures or reports (the
debugger, the tool named by the case, the metrics) must still be there, word for word.
"""
from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Callable

from lesson.course.learner.clinics import find_clinic_case

#: a line of a case script that measures or reports, rather than trains
_HARNESS = re.compile(
    r"NetworkDebugger|debugger\.|findings|Outcome\(|metrics|scores\(|locate_nonfinite|"
    r"validate_data|check_labels_carry_signal|find_label_issues|gradient_check|"
    r"overfit_one_batch|find_learning_rate|check_batch_independence|preflight")
#: ways of handing a loss to the debugger that measure the same thing (README recommends
#: `.detach()`, which keeps the value on the device; `.item()` copies it to the host)
_SAME_LOSS = re.compile(r"record_(val_)?loss\((\w+)\.(?:item|detach)\(\)\)")


def _normalised(line: str) -> str:
    return _SAME_LOSS.sub(lambda m: f"record_{m.group(1) or ''}loss({m.group(2)})", line.strip())


def _case(label: str) -> Any:
    return find_clinic_case(label).case


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
    case = _case(label)
    module = importlib.import_module(case.module)
    if repair in (case.train_broken, case.train_fixed):
        return ["this is the catalogue's own script, not a repair"]
    return _missing(repair, harness_lines(inspect.getsource(module.train_broken)))
