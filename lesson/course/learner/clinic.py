"""What a clinic notebook needs from a catalogue case: its card and script, the judgement of a
diagnosis, and the judgement of a repair.

A "repair" could simply stop measuring: `harness_changes` (`harness.py`) holds every line of
the broken script that measures or reports to the broken script's words. A repair could also
hide the symptom around the bug (a lower learning rate keeps an unsafe `log` from
meeting a zero; fewer steps end before the NaN; clipping tames a rate that is still 10):
`judge_repair` (`repair.py`) reads the set-up the repair trains with and refuses a change the
case's own fix does not make, and a cause left in place.
"""
from __future__ import annotations

import __future__
import difflib
import importlib
import linecache
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from broken_models.script import case_script, page_imports
from lesson.course.learner.clinics import find_clinic_case
from lesson.course.learner.harness import harness_changes, harness_lines  # noqa: F401 (re-exported)


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
    shown = into.setdefault(SHOWN_KEY, set()) if into is not None else set()
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


#: the name under which a namespace keeps the shared helpers show_case has printed for it (kept
#: in the namespace itself: a table keyed by id() would take a new dict at a dead one's address
#: for the same one, and say "printed above" of helpers it never showed)
SHOWN_KEY = "__nndebug_shown_helpers__"


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


def judge_repair(label: str, repair: Callable[..., Any], seed: int) -> Any:
    """The clinic's verdict on a repair on `seed` (a `RepairVerdict`: `.passed`, `.message`):
    the measuring lines kept, no set-up change that hides a symptom, the cause gone, and a
    healthy run, with the target's value and the findings in the message whatever fails. The
    broken and fixed scripts' set-ups are read on the visible seed."""
    from lesson.course.learner.clinics import VISIBLE_SEED
    from lesson.course.learner.repair import judge_repair as judge

    return judge(_case(label), repair, seed, reference_seed=VISIBLE_SEED)


@dataclass(frozen=True)
class DiagnosisVerdict:
    """How a diagnosis relates to the case's bug, in words a student can act on."""

    kind: str      # "cause", "consequence", "unrelated", "not a code" or "missing"
    message: str

    @property
    def right(self) -> bool:
        return self.kind == "cause"


def judge_diagnosis(label: str, code: Any, seed: int | None = None) -> DiagnosisVerdict:
    """Grade a diagnosis as the cause, as the report of the broken script's run on `seed`
    (default: the clinics' visible seed, the one the student reads) shows it: a code the case
    page lists in CAUSES is right (and the verdict then names the case) unless that report
    shows it following from another finding; one in CONSEQUENCES, or a cause the report shows
    following from another, is a consequence, and the verdict says so without naming the
    cause."""
    from lesson.findings import CODES

    found = find_clinic_case(label)
    case = found.case
    if code is None:
        return DiagnosisVerdict("missing", f'set diagnosis["{found.ident}"] to a code from '
                                "lesson.CODES")
    if not isinstance(code, str):
        return DiagnosisVerdict("not a code", f"{code!r} is not a code of lesson.CODES "
                                "(a code is a string in quotes, such as \"NAN_OR_INF\")")
    written, code = code, code.strip().upper().replace(" ", "_").replace("-", "_")
    if code not in CODES:
        near = difflib.get_close_matches(code, list(CODES), n=1, cutoff=0.75)
        return DiagnosisVerdict("not a code", f"{written!r} is not a code of lesson.CODES"
                                + (f" (did you mean {near[0]}?)" if near else
                                   "; the codes are upper case with underscores, such as "
                                   "\"NAN_OR_INF\": list(lesson.CODES) shows them all"))
    if code in case.causes and not _follows_in_report(case, code, seed):
        return DiagnosisVerdict("cause", f"{code} names the cause. Solved: {found.solved_line}")
    if code in case.causes or code in case.consequences:
        return DiagnosisVerdict("consequence", f"{code} is true of this run, but it is a "
                                "consequence of the bug, not its cause: what produced it?")
    return DiagnosisVerdict("unrelated", f"{code} is not what is wrong in this script: "
                            "read the evidence again (which finding explains the others?)")


def _follows_in_report(case: Any, code: str, seed: int | None) -> bool:
    """Does the report of the broken run on `seed` show `code` only as following from another
    finding? (A case with one cause never asks: nothing on its page can explain it.)"""
    if len(case.causes) == 1:
        return False
    from lesson.course.learner.clinics import VISIBLE_SEED
    from lesson.course.learner.repair import reference

    run = reference(case.name, VISIBLE_SEED if seed is None else seed).broken
    mine = [f for f in run.findings if f.code == code]
    return bool(mine) and all(f.explained_by for f in mine)
