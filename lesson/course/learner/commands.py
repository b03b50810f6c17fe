"""`nndebug exercises | check | hint | watch`: the learner's side of the course."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

from lesson.course.learner.catalog import Exercise, find_course_root, find_exercise, load_exercises
from lesson.course.learner.progress import DONE, FAILING, NOT_STARTED, Progress, notebook_hash
from lesson.course.learner.runner import (CheckResult, UnreadableNotebook, read_notebook,
                                          run_notebook)

#: the status of an exercise whose notebook file cannot be read (empty, cut short)
UNREADABLE = "unreadable"


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("--course-dir", type=Path, default=None,
                        help="the course repository (default: found from the current folder)")
    if command in {"check", "hint"}:
        parser.add_argument("exercise", nargs="?", default=None,
                            help="exercise name, or a unique prefix such as ex1, or a clinic "
                                 "case such as case1_3 (default: the first exercise not done)")
    if command == "check":
        parser.add_argument("--verbose", action="store_true",
                            help="show everything the test cells print (default: a few lines)")
    if command in {"check", "watch", "exercises"}:
        parser.add_argument("--data-dir", type=Path, default=None,
                            help="a folder holding data sets on disk (e.g. cifar-10-batches-py); "
                                 "the notebooks read it from NNDEBUG_DATA_DIR, never download")
    if command == "exercises":
        parser.add_argument("--recheck", action="store_true",
                            help="run every started exercise again, even if unchanged")
    if command == "watch":
        parser.add_argument("exercise", nargs="?", default=None,
                            help="the exercise or clinic case to watch (default: the first "
                                 "exercise not done)")
        parser.add_argument("--interval", type=float, default=1.0,
                            help="seconds between looks at the notebook (default 1)")
        parser.add_argument("--max-checks", type=int, default=0,
                            help="stop after this many checks (default 0: until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    try:
        root = find_course_root(args.course_dir)
        if getattr(args, "data_dir", None) is not None:
            if not args.data_dir.is_dir():
                raise ValueError(f"--data-dir {args.data_dir} is not a folder")
            os.environ["NNDEBUG_DATA_DIR"] = str(args.data_dir.resolve())  # kernels inherit it
        exercises = load_exercises()
        if args.command == "exercises":
            return show_progress(root, exercises, recheck=args.recheck)
        if args.command in {"check", "hint"}:
            chosen = (find_exercise(args.exercise, exercises) if args.exercise
                      else current_exercise(root, exercises))
            if chosen is None:
                print("Every exercise passes: nothing left to check. Well done.")
                return 0
            if args.command == "hint":
                return hint(root, chosen)
            return check(root, chosen, exercises, verbose=args.verbose)
        if args.command == "watch":
            chosen = find_exercise(args.exercise, exercises) if args.exercise else None
            if args.interval <= 0 or args.max_checks < 0:
                raise ValueError("--interval must be above 0 and --max-checks at least 0")
            return watch(root, exercises, chosen, args.interval, args.max_checks)
    except ValueError as exc:
        print(f"nndebug {args.command}: {exc}")
        return 2
    raise ValueError(f"lesson.course.learner.commands does not serve {args.command!r}")


# -- the pieces ------------------------------------------------------------------------------

def is_untouched(path: Path, cells: tuple[str, ...] = ()) -> bool:
    """True while every answer cell (only those of `cells` when given) still holds exactly
    what the release put there."""
    from nbgrader.utils import compute_checksum, is_solution

    nb = read_notebook(path)
    answers = [c for c in nb.cells if is_solution(c)
               and (not cells or c.metadata["nbgrader"].get("grade_id") in cells)]
    return all(c.metadata["nbgrader"].get("checksum") == compute_checksum(c) for c in answers)


def record(root: Path, exercise: Exercise, result: CheckResult) -> None:
    """Remember the outcome of a check that actually ran (of a clinic: of each case as well)."""
    progress = Progress(root)
    digest = notebook_hash(exercise.released(root))
    judged = [(exercise.name, result.tests)]
    if exercise.cases:
        from lesson.course.learner.catalog import case_exercise

        for label in exercise.cases:
            ids = set(case_exercise(label).tests)
            judged.append((label, [t for t in result.tests if t.name in ids]))
    for name, tests in judged:
        if not tests:
            continue
        entry = progress.get(name)
        entry.status = DONE if not result.error and all(t.passed for t in tests) else FAILING
        entry.notebook_hash = digest
        entry.score = (f"{sum(t.points for t in tests if t.passed):g}/"
                       f"{sum(t.points for t in tests):g}")
    progress.save()


def run_exercise(root: Path, exercise: Exercise) -> CheckResult:
    """Run the exercise's notebook (for one clinic case: its tests only)."""
    if exercise.tests:
        return run_notebook(exercise.released(root), only_tests=set(exercise.tests),
                            own_cells=set(exercise.answer_cells))
    return run_notebook(exercise.released(root))


def status_of(root: Path, exercise: Exercise, recheck: bool = False) -> tuple[str, str]:
    """(status, score): remembered while the notebook is unchanged, otherwise checked now."""
    path = exercise.released(root)
    if not path.is_file():
        return "missing", ""
    entry = Progress(root).get(exercise.name)
    try:
        if (not recheck and entry.status != NOT_STARTED
                and entry.notebook_hash == notebook_hash(path)):
            return entry.status, entry.score
        if is_untouched(path):
            return NOT_STARTED, ""
    except UnreadableNotebook:
        return UNREADABLE, ""
    print(f"  checking {exercise.name} ...", flush=True)
    result = run_exercise(root, exercise)
    record(root, exercise, result)
    entry = Progress(root).get(exercise.name)
    return entry.status, entry.score


def show_progress(root: Path, exercises: list[Exercise], recheck: bool = False) -> int:
    rows = [(e, *status_of(root, e, recheck)) for e in exercises]
    current = next((e for e, status, _ in rows if status != DONE), None)
    width = max(len(e.name) for e in exercises)
    progress = Progress(root)
    print(f"\n   {'exercise':<{width}}  {'status':<11}  {'score':>6}  title")
    for e, status, score in rows:
        mark = "->" if e is current else "  "
        cases = ""
        if e.cases:
            solved = sum(progress.get(label).status == DONE for label in e.cases)
            cases = f"  ({solved}/{len(e.cases)} cases done)"
        print(f"{mark} {e.name:<{width}}  {status:<11}  {score:>6}  {e.title}{cases}")
    for e, status, _ in rows:
        if status == UNREADABLE:
            print(f"\n   {e.released(root).relative_to(root)} cannot be read: "
                  f"`nndebug check {e.name}` says why and how to get it back.")
    done = sum(status == DONE for _, status, _ in rows)
    print(f"\n{done}/{len(rows)} done." + (f" Next: nndebug check {next_step(progress, current)}"
                                              if current else " All exercises pass: well done."))
    return 0


def unreadable_advice(root: Path, exc: UnreadableNotebook) -> str:
    """Which notebook cannot be read, why, and how to get it back (nothing is overwritten
    here: the damaged file may still hold the learner's answers)."""
    def shown(p: Path) -> Path:
        return p.relative_to(root) if p.is_relative_to(root) else p

    path = shown(exc.path)
    lines = [f"{path} cannot be read: {exc.reason}.",
             "nndebug changed nothing. To get a working notebook back:"]
    checkpoint = exc.path.parent / ".ipynb_checkpoints" / f"{exc.path.stem}-checkpoint.ipynb"
    if checkpoint.is_file():
        lines.append(f"  - Jupyter's last checkpoint may hold your answers: {shown(checkpoint)} "
                     "(in Jupyter: File > Revert Notebook to Checkpoint)")
    if any((folder / ".git").exists() for folder in (root, *root.parents)):
        lines += [f"  - keep the damaged file aside first: mv {path} {path}.damaged",
                  f"    then the committed version: git checkout -- {path}",
                  f"    (or look at it first: git show HEAD:./{path} > {path.stem}.released.ipynb)"]
    else:
        lines.append(f"  - copy {path} aside, then fetch the notebook again from the course")
    return "\n".join(lines)


def next_step(progress: Progress, exercise: Exercise) -> str:
    """What to check next: the exercise, or for a clinic its first case not done."""
    return next((label for label in exercise.cases if progress.get(label).status != DONE),
                exercise.name)


#: lines of a test cell's printed output shown without --verbose
PRINTED_LINES = 3
#: failing tests whose messages are shown (the first ones)
MAX_FAILURES = 3


def report(exercise: Exercise, result: CheckResult, hints_shown: int,
           verbose: bool = False) -> None:
    """In order: the first error in the student's own cells (when it can explain the first
    failure: only tests below its cell can), each test's result with what it printed, each
    failing test's message and failing line (the first MAX_FAILURES), and the offer of a
    hint."""
    print(f"\n{exercise.name}: {exercise.title}")
    if result.error:
        print(f"  the notebook did not finish: {result.error}")
    err, failure = result.answer_error, result.first_failure
    leads = err is not None and (failure.index > err.index if failure is not None
                                 else not result.tests)
    where = f", line {err.line}" if err is not None and err.line is not None else ""
    if leads:
        print(f"  your code raised an error first, in {err.cell}{where}:\n    {err.error}\n"
              "  (the tests below that use it fail because of it: fix this first)")
    for t in result.tests:
        print(f"  {'PASS' if t.passed else 'FAIL'}  {t.name} ({t.points:g} pt)")
        lines = t.printed.splitlines()
        for line in lines if verbose else lines[:PRINTED_LINES]:
            print(f"          | {line}")
        if not verbose and len(lines) > PRINTED_LINES:
            print(f"          | ... ({len(lines) - PRINTED_LINES} more lines: --verbose)")
    earned, possible = result.score
    print(f"  score on the visible tests: {earned:g}/{possible:g}")
    if err is not None and not leads:       # below the first failure: it cannot explain it
        print(f"  {err.cell} is not written yet: NotImplementedError{where} (a starting stub; "
              "the tests below it fail until it is)" if err.stub else
              f"  your code also raised an error, in {err.cell}{where}:\n    {err.error}\n"
              "  (the tests below it that use it fail because of it)")
    coverage = requirement_status(exercise, result)
    if coverage:
        print("\n  what the text asks, as the visible tests check it:")
        for test, text, status in coverage:
            print(f"    {status:<12} {text}  ({test})")
    if result.passed:
        print("  All visible tests pass. The grader also runs hidden tests on inputs you have "
              "not seen, so make sure your code does what the text asks, not only the example.")
        return
    failures = [t for t in result.tests if not t.passed]
    for i, failed in enumerate(failures):   # each test's own message: a clinic's repair test
        # tells the target's value and what is still there even while its diagnosis fails
        print(f"\n  {'first failure' if i == 0 else 'failure'}, {failed.name}:\n    "
              + (failed.message or "failed").replace("\n", "\n    "))
        if failed.message.startswith("NotImplementedError"):
            print("    (a function the test calls is still the starting stub: write it in the "
                  "cell marked YOUR CODE HERE)")
        if i + 1 >= MAX_FAILURES and len(failures) > MAX_FAILURES:
            print(f"\n  ... and {len(failures) - MAX_FAILURES} more failing tests (nndebug check "
                  "--verbose shows what each printed)")
            break
    if hints_shown < len(exercise.hints):
        print(f"\n  Stuck? nndebug hint {exercise.name} shows hint "
              f"{hints_shown + 1} of {len(exercise.hints)}.")


def requirement_status(exercise: Exercise, result: CheckResult) -> list[tuple[str, str, str]]:
    """(test, requirement, status) for each requirement the visible tests check: "met" when
    its assert passed, "NOT MET" for the one that failed, "not reached" after it (a test stops
    at its first failing assert) or when the test failed before checking any."""
    outcome = {t.name: t for t in result.tests}
    rows = []
    for test, texts in exercise.requirements:
        cell = outcome.get(test)
        if cell is None:
            continue
        failed_at = None if cell.passed else next(
            (i for i, text in enumerate(texts) if text in (cell.message or "")), len(texts))
        for i, text in enumerate(texts):
            status = ("met" if failed_at is None or i < failed_at and failed_at < len(texts)
                      else "NOT MET" if i == failed_at else "not reached")
            rows.append((test, text, status))
    return rows


def check(root: Path, exercise: Exercise, exercises: list[Exercise] | None = None,
          verbose: bool = False) -> int:
    path = exercise.released(root)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    try:
        read_notebook(path)
    except UnreadableNotebook as exc:
        print(unreadable_advice(root, exc))
        return 2
    if exercise.tests and is_untouched(path, exercise.answer_cells):
        print(f"{exercise.name}: not started. Open {path.relative_to(root)}, fill in the cell "
              f"of {exercise.title.split(' of ')[0]} and save; `nndebug hint {exercise.name}` "
              "helps.")
        return 1
    print(f"checking {path.relative_to(root)}"
          + (f" ({exercise.title})" if exercise.tests else "") + " ...", flush=True)
    result = run_exercise(root, exercise)
    record(root, exercise, result)
    report(exercise, result, Progress(root).get(exercise.name).hints_shown, verbose)
    if result.passed and exercises:
        following = step_after(Progress(root), exercise, exercises)
        if following:
            print(f"\n  Next: nndebug check {following}")
    return 0 if result.passed else 1


def step_after(progress: Progress, exercise: Exercise, exercises: list[Exercise]) -> str | None:
    """What to check after `exercise` passed: after a case, its clinic's next case not done;
    after the last one (or an assignment), the first exercise of the course not done, the
    one `nndebug exercises` names (an exercise skipped earlier comes first)."""
    if exercise.assignment:
        clinic = next((e for e in exercises if e.name == exercise.assignment), None)
        if clinic is None:
            return None
        label = next((c for c in clinic.cases if progress.get(c).status != DONE), None)
        if label is not None:
            return label
        exercise = clinic
    following = next((e for e in exercises if e is not exercise
                      and progress.get(e.name).status != DONE), None)
    return next_step(progress, following) if following is not None else None


def hint(root: Path, exercise: Exercise) -> int:
    progress = Progress(root)
    entry = progress.get(exercise.name)
    if not exercise.hints:
        print(f"{exercise.name} has no hints.")
        return 0
    if entry.hints_shown >= len(exercise.hints):
        print(f"No more hints for {exercise.name}; here they all are again:")
        for i, text in enumerate(exercise.hints, 1):
            print(f"  {i}. {text}")
        return 0
    entry.hints_shown += 1
    progress.save()
    print(f"Hint {entry.hints_shown} of {len(exercise.hints)} for {exercise.name}:\n"
          f"  {exercise.hints[entry.hints_shown - 1]}")
    return 0


def current_exercise(root: Path, exercises: list[Exercise]) -> Exercise | None:
    """The first exercise whose last check did not pass (rustlings' order)."""
    progress = Progress(root)
    return next((e for e in exercises if progress.get(e.name).status != DONE), None)


def watch(root: Path, exercises: list[Exercise], chosen: Exercise | None, interval: float,
          max_checks: int = 0, sleep: Callable[[float], None] = time.sleep,
          checker: Callable[[Path, Exercise], int] | None = None) -> int:
    """Check the current exercise now and again every time its notebook is saved.

    Follows the course order (after a pass it moves on) unless an exercise was chosen. Stops
    on Ctrl-C, when every exercise passes, or after `max_checks` checks (for scripts, tests).
    """
    checker = checker or (lambda r, e: check(r, e, exercises))
    checks = 0
    try:
        while True:
            exercise = chosen or current_exercise(root, exercises)
            if exercise is None:
                print("Every exercise passes. Nothing left to watch.")
                return 0
            path = exercise.released(root)
            if not path.is_file():
                raise ValueError(f"{path} does not exist")
            seen = path.stat().st_mtime_ns
            try:
                untouched = is_untouched(path, exercise.answer_cells)
            except UnreadableNotebook as exc:      # saved half-way, say: wait for a save
                print(unreadable_advice(root, exc) + "\nwaiting for the next save (Ctrl-C stops)")
                while path.stat().st_mtime_ns == seen:
                    sleep(interval)
                continue
            if untouched:                          # not started: wait for a save
                print(f"{exercise.name}: not started. Open {path.relative_to(root)}, "
                      "fill in the cells marked YOUR CODE HERE and save.")
                while path.stat().st_mtime_ns == seen:
                    sleep(interval)
                continue
            passed = checker(root, exercise) == 0
            checks += 1
            if max_checks and checks >= max_checks:
                return 0
            if passed and chosen is None:
                continue
            print(f"\nwatching {path.relative_to(root)}: save it to check again (Ctrl-C stops)")
            while path.stat().st_mtime_ns == seen:
                sleep(interval)
    except KeyboardInterrupt:
        print("\nstopped watching.")
        return 0
