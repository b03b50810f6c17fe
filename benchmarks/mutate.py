"""Mutation testing of the modules that decide things: does a small plausible bug fail a test?

    python benchmarks/mutate.py                        # every module of mutation_map.toml
    python benchmarks/mutate.py lesson/debugger/rules.py lesson/course/grading/
    python benchmarks/mutate.py --sample 150 ...       # a seeded random 150 mutants a module
    python benchmarks/mutate.py --report               # the table of the last runs again
    python benchmarks/mutate.py lesson/checks/lr_suggestion.py --lines 401-460   # new code

Cosmic Ray (PyPI `cosmic-ray`, the `mutation` extra) makes the mutants and runs a module's
test files (`mutation_map.toml`) once for each, on a copy of the tree: the working tree is
never touched, and the copy comes first on every import path, the subprocesses' included
(the grader's sandbox and zygote, nbgrader's kernels), so a mutant in code that runs there is
what runs there. A mutant is killed when a test fails (or the run passes its time limit).

The operators are the small bugs a reviewer would plant, one or two per site: a comparison's
edge (`<` for `<=`) or direction, `==`/`!=`, `is`/`is not`, `and`/`or`, a `not` added or
dropped, `True`/`False`, a number moved by one, an arithmetic operator swapped for its
inverse, `break`/`continue`, a loop that never runs, an `except` that catches nothing. Cosmic
Ray's other operators (every binary operator for every other, variable insertion) multiply the
count tenfold with mutants that crash at once. Mutants inside an f-string (the wording of a
message, its number of examples) are not run: a person reads those, and a test that pins a
message's exact text is the implementation trivia a suite should not hold; nor are mutants in
annotations that `from __future__ import annotations` leaves unevaluated. Equivalent mutants (a change no behaviour can
show) are listed with a reason in `mutation_equivalent.toml` and left out of the share.

Sessions are kept in `.mutation/` (one SQLite file a module): a run that stopped goes on
where it stopped; `--fresh` starts a module again. Prints, per module, mutants run, killed,
equivalent, surviving and the killed share, then each survivor (line and change).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
SESSIONS = ROOT / ".mutation"

#: the operators run (Cosmic Ray's names); see the module's docstring
OPERATORS = re.compile("|".join([
    r"core/ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Lt_Gt|Gt_Lt|LtE_GtE|GtE_LtE"
    r"|Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is)",
    r"core/ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Pow_Mul"
    r"|Mod_FloorDiv|BitOr_BitAnd|BitAnd_BitOr)",
    r"core/ReplaceUnaryOperator_(USub_UAdd|Delete_Not)",
    r"core/(AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak|NumberReplacer|ZeroIterationForLoop"
    r"|ExceptionReplacer)",
]) + r"$")
TARGETS = {"lesson/course/grading/": 0.90, "lesson/course/learner/clinic.py": 0.90}
DEFAULT_TARGET = 0.80


def load_map() -> tuple[dict[str, dict], str]:
    data = tomllib.loads((HERE / "mutation_map.toml").read_text())
    return data["modules"], data["defaults"]["markers"]


def load_equivalent() -> list[dict]:
    return tomllib.loads((HERE / "mutation_equivalent.toml").read_text()).get("equivalent", [])


def target(module: str) -> float:
    return next((t for prefix, t in TARGETS.items() if module.startswith(prefix)), DEFAULT_TARGET)


def select(modules: dict[str, dict], wanted: list[str]) -> list[str]:
    if not wanted:
        return list(modules)
    chosen = []
    for w in wanted:
        w = os.path.relpath(os.path.abspath(w), ROOT)
        hits = [m for m in modules if m == w or m.startswith(w.rstrip("/") + "/")]
        if not hits:
            sys.exit(f"mutate: {w} is not in benchmarks/mutation_map.toml (modules: "
                     f"{', '.join(modules)})")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def copy_tree() -> Path:
    """The tracked and untracked (not ignored) files, without caches, in a fresh folder."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    tree = Path(tempfile.mkdtemp(prefix="nndebug-mutation-"))
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and "__pycache__" not in src.parts:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / name)
    return tree


def pytest_args(spec: dict, markers: str) -> list[str]:
    return ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
            "-m", spec.get("markers", markers), *spec["tests"]]


def test_command(spec: dict, markers: str, server: Path, timeout: float) -> str:
    """What Cosmic Ray runs for one mutant: the module's tests, in a fork of the warm server."""
    return " ".join([sys.executable, str(HERE / "mutation_forkserver.py"), "run", str(server),
                     f"{timeout:.0f}", "--", *map(shlex.quote, pytest_args(spec, markers))])


@contextmanager
def warm_server(tree: Path):
    """benchmarks/mutation_forkserver.py serving in `tree`, its imports done."""
    sock = Path(tempfile.mkdtemp(prefix="nndebug-forkserver-")) / "socket"
    proc = subprocess.Popen(["nice", "-n", "10", sys.executable, str(HERE / "mutation_forkserver.py"),
                             "serve", str(sock)], cwd=tree, env=run_env(tree),
                            stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            sys.exit("mutate: the fork server did not start")
        yield sock
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(sock.parent, ignore_errors=True)


def run_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def baseline(tree: Path, spec: dict, markers: str, server: Path) -> float:
    """Seconds the unmutated tests take; they must pass, and import the copy."""
    env = run_env(tree)
    where = subprocess.run([sys.executable, "-c", "import lesson; print(lesson.__file__)"],
                           cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    if not where.startswith(str(tree)):
        sys.exit(f"mutate: the copy's lesson is not the one imported ({where.strip()})")
    start = time.monotonic()
    done = subprocess.run(shlex.split(test_command(spec, markers, server, 3600)), cwd=tree,
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"mutate: the tests fail without any mutant:\n{done.stdout[-3000:]}"
                 f"{done.stderr[-2000:]}")
    return time.monotonic() - start


def session(module: str) -> Path:
    return SESSIONS / (module.replace("/", "__") + ".sqlite")


def _message_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every f-string of a module, and of every annotation where
    `from __future__ import annotations` keeps them from being evaluated."""
    import ast

    tree = ast.parse(path.read_text())
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
           and any(a.name == "annotations" for a in n.names) for n in tree.body):
        for n in ast.walk(tree):
            if isinstance(n, ast.arg) and n.annotation is not None:
                nodes.append(n.annotation)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns:
                nodes.append(n.returns)
            elif isinstance(n, ast.AnnAssign):
                nodes.append(n.annotation)
    return [((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)) for n in nodes]


def _in_message(mutation, spans) -> bool:
    start = (mutation.start_pos[0], mutation.start_pos[1])
    return any(a <= start < b for a, b in spans)


def init(module: str, spec: dict, markers: str, tree: Path, sample: int | None,
         server: Path, timeout: float, lines: tuple[int, int] | None = None) -> Path:
    """A Cosmic Ray session for `module`: its config, the chosen mutants pending (those on
    `lines`, first to last, when given: new code measured on its own)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    SESSIONS.mkdir(exist_ok=True)
    config = session(module).with_suffix(".toml")
    config.write_text("\n".join([
        "[cosmic-ray]", f'module-path = "{module}"', f"timeout = {timeout + 30:.0f}",
        "excluded-modules = []",
        f"test-command = {json.dumps(test_command(spec, markers, server, timeout))}",
        "[cosmic-ray.distributor]", 'name = "local"', ""]))
    db = session(module)
    db.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "init", str(config), str(db)],
                   cwd=tree, env=run_env(tree), check=True)
    with use_db(str(db), WorkDB.Mode.open) as work:
        items = list(work.pending_work_items)
        spans = _message_spans(tree / module)
        chosen = [i for i in items if OPERATORS.match(i.mutations[0].operator_name)
                  and not _in_message(i.mutations[0], spans)
                  and (lines is None or lines[0] <= i.mutations[0].start_pos[0] <= lines[1])]
        if sample is not None and sample < len(chosen):
            chosen = random.Random(0).sample(chosen, sample)
        keep = {i.job_id for i in chosen}
        skip = [i.job_id for i in items if i.job_id not in keep]
        work.set_multiple_results(skip, WorkResult(output="not chosen",
                                                   worker_outcome=WorkerOutcome.SKIPPED))
    return db


def _point_at(module: str, spec: dict, markers: str, server: Path) -> None:
    """A resumed session's config: the new server's socket, and the map's tests as they are
    now (a test file added since the session began judges the mutants left)."""
    config = session(module).with_suffix(".toml")
    text = config.read_text()
    timeout = float(re.search(r"^timeout = (\S+)", text, re.M).group(1)) - 30
    command = json.dumps(test_command(spec, markers, server, timeout))
    config.write_text(re.sub(r"^test-command = .*$", lambda _: f"test-command = {command}", text,
                             flags=re.M))


def retry_survivors(module: str) -> int:
    """Make the surviving mutants of `module`'s session pending again (after new tests)."""
    import sqlite3

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    with use_db(str(session(module)), WorkDB.Mode.open) as work:
        again = [item.job_id for item, result in work.completed_work_items
                 if result.worker_outcome != WorkerOutcome.SKIPPED
                 and result.test_outcome == TestOutcome.SURVIVED]
    with sqlite3.connect(session(module)) as db:
        db.executemany("DELETE FROM work_results WHERE job_id = ?", [(j,) for j in again])
    return len(again)


def execute(module: str, tree: Path) -> None:
    config = session(module).with_suffix(".toml")
    cmd = ["nice", "-n", "10", sys.executable, "-m", "cosmic_ray.cli", "exec", str(config),
           str(session(module))]
    subprocess.run(cmd, cwd=tree, env=run_env(tree), check=True)


def _changed_lines(diff: str) -> tuple[str, str, int | None]:
    """(original line, mutated line, its line number) from a Cosmic Ray unified diff."""
    before = after = ""
    line = number = None
    for text in diff.splitlines():
        if text.startswith(("---", "+++")):
            continue
        if hunk := re.match(r"@@ -(\d+)", text):
            number = int(hunk.group(1))
        elif text.startswith("-") and not before:
            before, line = text[1:].strip(), number
        elif text.startswith("+") and not after:
            after = text[1:].strip()
        elif number is not None and not before and text.startswith(" "):
            number += 1
    return before, after, line


def results(module: str) -> dict | None:
    db = session(module)
    if not db.exists():
        return None
    equivalent = [e for e in load_equivalent() if e["module"] == module]
    spans = _message_spans(ROOT / module)      # sessions made before a filter was added
    out = {"run": 0, "killed": 0, "equivalent": [], "survived": [], "pending": 0,
           "incompetent": 0}
    # read a snapshot: a run still writing this session failed with "attempt to write a
    # readonly database" after a report opened the file beside it
    snapshot = Path(tempfile.mkdtemp(prefix="mutate-report-")) / db.name
    live, copy = sqlite3.connect(db), sqlite3.connect(snapshot)
    try:
        live.backup(copy)
    finally:
        live.close()
        copy.close()
    try:
        return _results_from(snapshot, module, equivalent, spans, out)
    finally:
        shutil.rmtree(snapshot.parent, ignore_errors=True)


def _results_from(db: Path, module: str, equivalent: list[dict], spans: list, out: dict) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    with use_db(str(db), WorkDB.Mode.open) as work:
        done = {item.job_id: result for item, result in work.completed_work_items}
        for item in work.work_items:
            result = done.get(item.job_id)
            if result is not None and result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if _in_message(item.mutations[0], spans):
                continue
            if result is None:
                out["pending"] += 1
                continue
            if result.test_outcome == TestOutcome.INCOMPETENT:
                out["incompetent"] += 1     # the mutant could not be made or imported
                continue
            out["run"] += 1
            before, after, line = _changed_lines(result.diff or "")
            mutation = item.mutations[0]
            entry = {"line": line, "before": before, "after": after,
                     "operator": mutation.operator_name.split("/")[-1]}
            if result.is_killed:
                out["killed"] += 1
            elif (reason := next((e["reason"] for e in equivalent if e["line"] == after
                                  and e.get("before", before) == before), None)):
                out["equivalent"].append(entry | {"reason": reason})
            else:
                out["survived"].append(entry)
    return out


def report(modules: list[str]) -> bool:
    """Print the table and the survivors; True when every module measured meets its target."""
    rows, met = [], True
    print(f"{'module':45} {'run':>5} {'killed':>6} {'equiv':>5} {'surv':>5} {'killed %':>9}"
          f" {'target':>6}")
    for module in modules:
        r = results(module)
        if r is None:
            print(f"{module:45} {'(not run)':>5}")
            continue
        judged = r["run"] - len(r["equivalent"])
        share = r["killed"] / judged if judged else math.nan
        ok = judged > 0 and share >= target(module)
        met &= ok or judged == 0
        note = f"  ({r['pending']} pending)" if r["pending"] else ""
        print(f"{module:45} {r['run']:>5} {r['killed']:>6} {len(r['equivalent']):>5} "
              f"{len(r['survived']):>5} {share:>9.1%} {target(module):>6.0%}"
              f"{'' if ok else '  BELOW'}{note}")
        rows.append((module, r))
    for module, r in rows:
        for s in sorted(r["survived"], key=lambda s: s["line"] or 0):
            print(f"SURVIVED {module}:{s['line']} [{s['operator']}]\n    - {s['before']}\n"
                  f"    + {s['after']}")
    return met


def _line_range(text: str) -> tuple[int, int]:
    """'120-180' -> (120, 180), '7' -> (7, 7); argparse reports a ValueError as a bad
    argument."""
    first, _, last = text.partition("-")
    a, b = int(first), int(last or first)
    if not 1 <= a <= b:
        raise ValueError(text)
    return a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="modules or folders (default: all mapped)")
    parser.add_argument("--sample", type=int, help="at most this many mutants per module")
    parser.add_argument("--report", action="store_true", help="only print the last results")
    parser.add_argument("--fresh", action="store_true", help="start sessions again")
    parser.add_argument("--lines", type=_line_range, metavar="FIRST-LAST",
                        help="only the mutants on these lines (new code; starts the session "
                             "again, so one module only)")
    parser.add_argument("--survivors", action="store_true",
                        help="run the last survivors again (after adding tests)")
    args = parser.parse_args(argv)
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        sys.exit("mutate: Cosmic Ray is not installed: run `make mutate`, which installs it, "
                 "or `pip install -e '.[mutation]'`")
    mapped, markers = load_map()
    modules = select(mapped, args.paths)
    if args.lines is not None and (len(modules) != 1 or args.report or args.survivors):
        sys.exit("mutate: --lines needs exactly one module, and starts its session again "
                 "(not with --report or --survivors)")
    if not args.report:
        tree = copy_tree()
        try:
            for module in modules:
                spec = mapped[module]
                missing = [t for t in spec["tests"] if not (ROOT / t.split("::")[0]).exists()]
                if missing:
                    sys.exit(f"mutate: {module}'s tests {missing} do not exist")
                with warm_server(tree) as server:
                    seconds = baseline(tree, spec, markers, server)
                    print(f"== {module}: baseline {seconds:.1f} s", flush=True)
                    if args.fresh or args.lines or not session(module).exists():
                        init(module, spec, markers, tree, args.sample, server,
                             timeout=3 * seconds + 30, lines=args.lines)
                    else:       # resumed: the new server's socket in the command
                        _point_at(module, spec, markers, server)
                        if args.survivors:
                            print(f"   {retry_survivors(module)} survivors again", flush=True)
                    execute(module, tree)
                report([module])
        finally:
            shutil.rmtree(tree, ignore_errors=True)
    print()
    return 0 if report(modules) else 1


if __name__ == "__main__":
    sys.exit(main())
