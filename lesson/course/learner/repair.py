"""The clinics' repair judgement: did the repair remove the bug's cause, or hide its symptom?

A repair passes when
1. it keeps the lines that measure the run word for word (`clinic.harness_changes`);
2. it changes nothing of the set-up that the catalogue's fix keeps (a learning rate, the
   number of steps, clipping, weight decay, the model's size, the seed, ...: `run_setup`),
   unless the case page declares that kind of change a real fix (REAL_FIXES: weight decay is
   one for overfitting);
3. the cause is gone: what the catalogue's fix changes (its settings, its lines) is not left
   exactly as the broken script has it, unless a declared real fix does the work instead;
4. the run is healthy: no finding, and the target reached.

The verdict's message always shows the target with the value the run reached and the
findings, so a student sees how far a repair got, whatever else is wrong with it.
"""
from __future__ import annotations

import difflib
import inspect
import math
import textwrap
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from lesson.course.learner.run_setup import (KINDS, Change, RunSetup, cause_settings,
                                             record_setup, setup_changes)


@dataclass
class RepairVerdict:
    """The judgement of one repair on one seed."""

    passed: bool
    message: str
    seed: int
    run: Any = None                                         # the judged `Run`, if it ran
    harness: list[str] = field(default_factory=list)        # measuring lines changed
    hiding: list[Change] = field(default_factory=list)      # set-up changes that hide
    real: list[Change] = field(default_factory=list)        # declared real fixes it made
    cause_left: list[str] = field(default_factory=list)     # what the fix changes, unchanged

    def __bool__(self) -> bool:
        return self.passed


def _strip(line: str) -> str:
    return " ".join(line.split())


def _lines(source: str) -> list[str]:
    return [_strip(ln) for ln in textwrap.dedent(source).splitlines() if ln.strip()]


def _in_context(lines: list[str], i: int) -> tuple[str, str, str]:
    """Line `i` with the lines before and after it: a line moved elsewhere is not in place."""
    return (lines[i - 1] if i > 0 else "", lines[i], lines[i + 1] if i + 1 < len(lines) else "")


def fix_sites(case: Any) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """Where the catalogue's fix changes the broken script: (the lines it changes, moves or
    removes, each with the line before and after it; the places it inserts lines at, each as
    the pair of lines it inserts between). Blank lines are skipped."""
    broken, fixed = _lines(case.source("broken")), _lines(case.source("fixed"))
    changed, inserted = [], []
    for op, i1, i2, _, _ in difflib.SequenceMatcher(None, broken, fixed,
                                                    autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            changed += [_in_context(broken, i) for i in range(i1, i2)
                        if not broken[i].startswith("def train_broken(")]
        elif op == "insert" and 0 < i1 < len(broken):
            inserted.append((broken[i1 - 1], broken[i1]))
    return changed, inserted


def _source(fn: Callable[..., Any]) -> str | None:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


@dataclass(frozen=True)
class Reference:
    """The catalogue's own scripts on one seed: the broken run (its report decides which of
    the page's CAUSES the student may name) and the set-ups of both."""

    broken: Any
    broken_setup: RunSetup
    fixed_setup: RunSetup


@lru_cache(maxsize=64)
def reference(name: str, seed: int) -> Reference:
    """The case's broken and fixed scripts on `seed`, each trained once per process."""
    from broken_models import get_case

    case = get_case(name)
    with record_setup() as broken_setup:
        broken = case.run_broken(seed)
    with warnings.catch_warnings(), record_setup() as fixed_setup:
        warnings.simplefilter("ignore")
        case.train_fixed(seed)
    return Reference(broken, broken_setup, fixed_setup)


def reference_setups(name: str, seed: int) -> tuple[RunSetup, RunSetup]:
    """The set-up of the case's broken and fixed scripts on `seed`."""
    ref = reference(name, seed)
    return ref.broken_setup, ref.fixed_setup


def trained_setup(repair: Callable[..., Any], seed: int) -> tuple[Any, RunSetup]:
    """Run `repair(seed)` and return its outcome with the set-up it trained with. In the
    grader's clean room the repair runs in the student's sandbox, which records the set-up
    there and sends it back with the outcome (`_nndebug_setup`); here nothing trains, so the
    local record is empty and that one counts."""
    with record_setup() as local:
        outcome = repair(seed)
    remote = getattr(outcome, "_nndebug_setup", None)
    seen_here = local.optimizers or any(local.layers.values())
    return outcome, local if seen_here or not isinstance(remote, RunSetup) else remote


def _watched(repair: Callable[..., Any], into: dict[str, RunSetup]) -> Callable[[int], Any]:
    """`repair`, leaving the set-up it trains with in `into["setup"]` (`trained_setup`)."""
    def run(seed: int) -> Any:
        outcome, into["setup"] = trained_setup(repair, seed)
        return outcome
    return run


def judge_repair(case: Any, repair: Callable[..., Any], seed: int,
                 reference_seed: int | None = None) -> RepairVerdict:
    """Judge `repair` (a function of the seed, like the case's scripts) on `seed`; the broken
    and fixed scripts' set-ups are read on `reference_seed` (default: `seed`)."""
    from lesson.course.learner.harness import harness_changes

    ref = seed if reference_seed is None else reference_seed
    harness = harness_changes(case.name, repair)
    if harness:
        return RepairVerdict(False, "The repair changed the lines that measure the run; keep "
                             "them word for word (the bug is not in them): "
                             + "; ".join(harness), seed, harness=harness)
    into: dict[str, RunSetup] = {}
    run = case.evaluate(_watched(repair, into), seed=seed)
    broken, fixed = reference_setups(case.name, ref)
    mine = into.get("setup", RunSetup())
    changes = setup_changes(broken, fixed, mine, seeds=(ref, ref, seed))
    if _stopped_at_its_nan(run, broken, fixed):
        # the script's own stop at the first NaN, as the broken one stops: not a cut loop
        changes = [c for c in changes if c.kind != "fewer_steps"]
    real = [c for c in changes if c.kind in case.real_fixes]
    hiding = [c for c in changes if c.kind not in case.real_fixes]
    cause_left, by_settings = ([], False) if real else _cause_left(case, broken, fixed, mine,
                                                                   repair)
    # a setting the fix changes, left as it was while the repair changed the set-up elsewhere:
    # the cause is in place (kept lines prove nothing: a repair may undo them further down)
    refused_cause = cause_left if by_settings and changes else []
    passed = run.healthy and not hiding and not refused_cause
    lines = [_headline(passed, run, hiding, refused_cause, seed),
             "  target: " + case.target_report(run.metrics),
             "  findings: " + (", ".join(run.codes) if run.codes else "none")]
    for c in hiding:
        lines.append(f"  changed where the bug is not: {c.says}. {KINDS[c.kind].capitalize()}; "
                     "the catalogue's fix keeps this setting, so changing it hides a symptom "
                     "instead of removing the cause.")
    if refused_cause or (cause_left and hiding):
        lines.append("  still there: " + "; ".join(cause_left) + ".")
    elif hiding and run.healthy:
        lines.append("  still there: the cause the catalogue's fix removes; the change above "
                     "only keeps it from showing in this run.")
    return RepairVerdict(passed, "\n".join(lines), seed, run, [], hiding, real, refused_cause)


def _stopped_at_its_nan(run: Any, broken: RunSetup, fixed: RunSetup) -> bool:
    """Did the repair's run end on a NaN/Inf loss, in a script that stops there (the broken
    script steps fewer times than the fixed one: it leaves the loop at its NaN)?"""
    steps = lambda s: sum(o.steps for o in s.optimizers)  # noqa: E731
    losses = list(getattr(run.debugger, "loss_history", None) or [])
    return steps(broken) < steps(fixed) and bool(losses) and not math.isfinite(losses[-1])


def _headline(passed: bool, run: Any, hiding: list[Change], cause_left: list[str],
              seed: int) -> str:
    if passed:
        return f"Seed {seed}: the repair passes: no finding, and the target is reached."
    why = []
    if hiding:
        why.append("it changes the set-up the bug is not in")
    if cause_left:
        why.append("the cause is still in place")
    if run.codes:
        why.append("the diagnostics still find " + ", ".join(run.codes))
    if not run.target_reached:
        why.append("the target is missed")
    return f"Seed {seed}: the repair does not pass: " + "; ".join(why) + "."


def _cause_left(case: Any, broken: RunSetup, fixed: RunSetup, mine: RunSetup,
                repair: Callable[..., Any]) -> tuple[list[str], bool]:
    """What the catalogue's fix changes that the repair leaves as the broken script has it,
    in words ([] when the repair changed it, or when nothing can tell), and whether settings
    the run shows say so. Where the fix changes such settings (a learning rate, a layer
    kind), those decide, however the repair writes them; otherwise the lines the fix changes
    do, each in its place, and where it only inserts lines, the places it inserts them at
    (a repair may still undo a kept line further down, or write the same thing elsewhere:
    lines are told, never proof)."""
    if cause_settings(broken, fixed, broken):      # the fix changes settings: they decide
        return cause_settings(broken, fixed, mine), True
    changed, inserted = fix_sites(case)
    source = _source(repair)
    if source is None or not (changed or inserted):
        return [], False
    mine_lines = _lines(source)
    contexts = {_in_context(mine_lines, i) for i in range(len(mine_lines))}
    pairs = set(zip(mine_lines, mine_lines[1:]))
    if changed:
        if all(site in contexts for site in changed):
            n = len(changed)
            return [f"the {n} line{'s' if n > 1 else ''} the catalogue's fix changes, as the "
                    f"broken script has {'them' if n > 1 else 'it'}"], True
        return [], False
    if all(pair in pairs for pair in inserted):
        return ["nothing added where the catalogue's fix adds its line"
                + ("s" if len(inserted) > 1 else "")], False
    return [], False
