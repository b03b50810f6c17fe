"""A class graded in parallel on dask.distributed, into nbgrader's gradebook.

`grade_class` finds every submission under `submitted/<student>/<assignment>/` that is new
or changed since it was last graded into the gradebook being written (its fingerprint is kept
there with its status, `status.py`), or could not be graded then, and sends one task per
submission to a Dask cluster (an embedded LocalCluster, or an existing one by address). A worker runs nbgrader's own sanitize
steps (the locked cells restored from the gradebook), the clean room in place of Execute and
nbgrader's output filters, and hands back the graded notebooks. Results are written exactly
once per submission, as they arrive: by the client for SQLite (one writer), or by the worker
itself for PostgreSQL. A worker that dies mid-grade has its task rescheduled by Dask; a
result that arrives twice is written once.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gradebook as gbk
from . import status
from .gradebook import Submission

#: nbgrader's own sanitize steps, then ours in place of Execute, then its output filters
SANITIZE = ("nbgrader.preprocessors.ClearOutput", "nbgrader.preprocessors.DeduplicateIds",
            "nbgrader.preprocessors.OverwriteKernelspec", "lesson.course.grading.quiet.OverwriteCells",
            "nbgrader.preprocessors.CheckCellMetadata")
AUTOGRADE = ("lesson.course.grading.preprocessor.CleanRoomExecute",
             "nbgrader.preprocessors.IgnorePattern",
             "nbconvert.preprocessors.ClearMetadataPreprocessor",
             "nbgrader.preprocessors.LimitOutput")


class Usage(ValueError):
    """The command was given something it cannot use (exit 2)."""


class Infrastructure(RuntimeError):
    """The gradebook, the cluster or the course folder failed us, not a submission (exit 3);
    `advice` says what to do."""

    def __init__(self, message: str, advice: str):
        super().__init__(message)
        self.advice = advice


@dataclass
class Outcome:
    """What happened to one submission: `status.GRADED`, `TAMPERING` or `UNGRADED`
    (then `reason` says why)."""

    student: str
    assignment: str
    status: str
    lines: list[str] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0

    @property
    def graded(self) -> bool:
        return self.status != status.UNGRADED

    @property
    def tampering(self) -> bool:
        return self.status == status.TAMPERING


@dataclass
class Report:
    """The class's run: outcomes, skipped (unchanged) submissions, the gradebook's scores
    and statuses, notes (the budgets)."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    scores: dict[tuple[str, str], tuple[float | None, float]] = field(default_factory=dict)
    states: dict[tuple[str, str], status.State] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ungraded(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.graded]


def load_config(root: Path) -> Any:
    """The course's nbgrader_config.py, as nbgrader reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def discover(root: Path, assignments: list[str]) -> list[Submission]:
    """Every submitted/<student>/<assignment>/ folder, limited to `assignments` if given."""
    base = root / "submitted"
    found = []
    for student in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        for folder in sorted(p for p in student.iterdir() if p.is_dir()):
            if not assignments or folder.name in assignments:
                found.append(Submission(student.name, folder.name, folder))
    return found


def _import(dotted: str):
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def grade_submission(job: dict) -> dict:
    """A worker's task: grade one submission's notebooks (sent as text); JSON-ready result.
    `error` set means the submission could not be graded (its reason)."""
    import nbformat

    from .preprocessor import GradingFailed

    start = time.monotonic()
    config = job["config"]
    result: dict[str, Any] = {"student": job["student"], "assignment": job["assignment"],
                              "graded": {}, "lines": [], "states": {}, "error": None}
    for name, text in job["notebooks"].items():
        if text is None:
            result["lines"].append(f"{name}.ipynb was not submitted: its tests score 0")
            result["states"][name] = (status.GRADED, "")
            continue
        try:
            nb = nbformat.reads(text, as_version=4)
        except Exception as exc:                  # not JSON, not a notebook
            result["error"] = (f"{name}.ipynb is not a readable notebook "
                               f"({type(exc).__name__}: {str(exc)[:200]})")
            return result
        resources = {"nbgrader": {"notebook": name, "assignment": job["assignment"],
                                  "student": job["student"], "db_url": job["url"]}}
        try:
            for dotted in SANITIZE + AUTOGRADE:
                pp = _import(dotted)(config=config)
                if dotted.endswith("CleanRoomExecute"):
                    pp.timeout, pp.memory_mb = job["timeout"], job["memory_mb"]
                    pp.budget = job["budget"].get(name, 0.0)
                    pp.deny, pp.deny_cwd = job["deny"], False   # a worker's cwd is not the course
                    pp.note_status = False
                nb, resources = pp(nb, resources)   # honours `enabled`, as nbconvert does
        except GradingFailed as exc:
            result["error"] = f"{name}.ipynb: {exc}"
            return result
        except Exception as exc:
            result["error"] = f"{name}.ipynb could not be graded ({type(exc).__name__}: {exc})"
            return result
        tampering = resources.get("nndebug", {}).get("tampering", {})
        reasons = [r for rs in tampering.values() for r in rs]
        result["states"][name] = ((status.TAMPERING, status.technique(reasons)) if reasons
                                  else (status.GRADED, ""))
        for label, found in tampering.items():
            result["lines"].append(f"TAMPERING in {label}: " + "; ".join(found)[:300])
        for index, cell in enumerate(nb.cells):
            label = (cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
                     or f"cell {index}")
            for out in cell.get("outputs", []):
                line = _reportable(out)
                if line:
                    result["lines"].append(f"{label}: {line}")
        result["graded"][name] = nb
    result["seconds"] = time.monotonic() - start
    if job["write"]:
        gbk.record(job["url"], job["student"], job["assignment"], result["graded"], config,
                   result["states"], job["fingerprint"], result["seconds"])
    return result


def _reportable(out: dict) -> str | None:
    """An error output the instructor should see in the report, as one line: a limit hit
    (time, memory, budget), a sandbox that died, an answer cell that is not Python."""
    if out.get("output_type") != "error":
        return None
    name, value = out.get("ename"), out.get("evalue", "")[:200]
    if name in ("SyntaxError", "IndentationError", "TabError"):
        return f"{name} at {value}"
    if name in ("TimeoutError", "GraderError", "MemoryError") or (
            name == "RuntimeError" and "sandbox" in value):
        return value
    return None


def measure_solution(job: dict) -> float:
    """A worker's task: the seconds the instructor's solution spends in the sandbox."""
    from . import budget

    return budget.measure(job["text"], job["timeout"], job["memory_mb"], job["deny"])


def _client(workers: int | None, scheduler: str | None, connect_timeout: float):
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=f"{connect_timeout:g}s")
        except (OSError, TimeoutError) as exc:
            raise Infrastructure(f"no Dask scheduler answers at {scheduler} ({exc})",
                                 "start one there (`dask scheduler`, then `dask worker "
                                 f"{scheduler} --nthreads 1` on each host), check the "
                                 "address and firewall, or leave out --scheduler to grade on "
                                 "this machine") from None
        try:
            client.wait_for_workers(1, timeout=connect_timeout)
        except (OSError, TimeoutError):
            client.close()
            raise Infrastructure(f"the Dask scheduler at {scheduler} has no workers",
                                 f"start `dask worker {scheduler} --nthreads 1` on each "
                                 "grading host") from None
        return client, None
    import os

    n = workers or os.cpu_count() or 1
    # a port of its own for the scheduler's HTTP server (8787 may be another cluster's), and
    # no log lines: a task's failure comes back with its result, and a worker's complaints
    # while the cluster shuts down are noise
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=":0", memory_limit=0, silence_logs=50)
    return Client(cluster), cluster


def open_gradebook(url: str) -> None:
    """Infrastructure when the gradebook at `url` cannot be opened (server down, a folder
    that does not exist, no permission)."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with Gradebook(url):
            pass
    except (SQLAlchemyError, OSError) as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise Infrastructure(
            f"cannot open the gradebook {_safe(url)}: {detail[0] if detail else exc}",
            "start the database server, or check --db (user, host, port, database name), or "
            "the folder and permissions of gradebook.db") from None


def _safe(url: str) -> str:
    """A database URL without its password: all up to the last `@`, so that a password
    written with an `@` or a `/` in it (unescaped) is not shown in part."""
    import re

    return re.sub(r"://([^:/@]+):.*@", r"://\1:***@", url)


def grade_class(root: Path, assignments: list[str] | None = None, *, workers: int | None = None,
                scheduler: str | None = None, db: str | None = None, timeout: float | None = None,
                memory_mb: int | None = None, budget: float | None = None,
                students: list[str] | None = None, force: bool = False, progress: bool = True,
                client: Any = None, connect_timeout: float = 30.0) -> Report:
    """Grade the class in `root`; see the module's docstring. Usage for what the caller
    asked wrongly, Infrastructure for what failed around the submissions."""
    start = time.monotonic()
    root = Path(root).resolve()
    try:
        config = load_config(root)
    except Exception as exc:
        raise Infrastructure(f"{root / 'nbgrader_config.py'} does not load: "
                             f"{type(exc).__name__}: {exc}", "fix the course's configuration"
                             ) from None
    try:
        url = gbk.db_url(root, db)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    course_url = gbk.db_url(root, None)
    open_gradebook(course_url)
    open_gradebook(url)
    gbk.ensure_assignments(url, course_url)
    known = set(_assignment_names(url))
    if not known:
        raise Infrastructure(f"the gradebook of {root} has no assignments",
                             "run `nbgrader generate_assignment \"*\"` in the course folder")
    assignments = list(assignments or [])
    unknown = [a for a in assignments if a not in known]
    if unknown:
        raise Usage(f"no assignment {', '.join(unknown)} in the gradebook (known: "
                    f"{', '.join(sorted(known))})")
    if not (root / "submitted").is_dir():
        raise Infrastructure(f"no submitted/ folder in {root}",
                             "collect the class's work into submitted/<student>/<assignment>/ "
                             "(nbgrader collect, or copy it there)")
    found = discover(root, assignments)
    if students:
        missing = sorted(set(students) - {s.student for s in found})
        if missing:
            raise Usage(f"no submission from {', '.join(missing)} under submitted/"
                        + (f" for {', '.join(assignments)}" if assignments else ""))
        found = [s for s in found if s.student in students]
    report = Report()
    states = status.read(url)
    todo, fps = [], {}
    for sub in found:
        if sub.assignment not in known:
            report.outcomes.append(Outcome(sub.student, sub.assignment, status.UNGRADED,
                                           [f"unknown assignment {sub.assignment}"],
                                           reason="unknown assignment"))
            continue
        fp = status.fingerprint(sub.folder)
        state = states.get(sub.key)
        if not (force or students) and state is not None and state.graded \
                and state.fingerprint == fp:
            report.skipped.append(sub.key)
            continue
        todo.append(sub)
        fps[sub.key] = fp
    timeout = timeout or float(_cfg(config, "timeout", 60.0))
    memory_mb = memory_mb or int(_cfg(config, "memory_mb", 3072))
    own = client is None
    cluster = None
    if own and todo:
        client, cluster = _client(workers, scheduler, connect_timeout)
    try:
        if todo:
            _check_memory(client, memory_mb)
            stamps = {s.key: _timestamp(s.folder) for s in todo}
            gbk.prepare(url, todo, stamps)
            budgets = _budgets(client, root, config, url, todo, timeout, memory_mb, budget,
                               report)
            _run(client, root, config, url, todo, fps, budgets, timeout, memory_mb, progress,
                 report)
    finally:
        if own and client is not None:
            client.close()
            if cluster is not None:
                cluster.close()
    report.scores = gbk.scores(url)
    report.states = status.read(url)
    report.seconds = time.monotonic() - start
    return report


def _check_memory(client: Any, memory_mb: int) -> None:
    """Usage when `memory_mb` is below what the workers' sandboxes need; starts every
    worker's zygote meanwhile (the first notebook then finds torch imported)."""
    from .sandbox import MemoryTooLow, memory_floor_mb
    from .zygote import prewarm

    try:
        mapped = client.run(prewarm)
    except Exception:        # a worker that cannot start one starts it with its first notebook
        return
    largest = max(mapped.values(), default=0.0)
    if largest and memory_mb < memory_floor_mb(largest):
        raise Usage(str(MemoryTooLow(memory_mb, largest)))


def _budgets(client: Any, root: Path, config: Any, url: str, todo: list[Submission],
             timeout: float, memory_mb: int, given: float | None, report: Report
             ) -> dict[tuple[str, str], float]:
    """(assignment, notebook) -> the budget of each notebook to grade: `given`, or a few
    times its solution's time (kept in the gradebook; measured on the cluster if not)."""
    from . import budget

    pairs = sorted({(s.assignment, nb) for s in todo for nb in gbk.notebooks_of(url, s.assignment)})
    if given:
        return {pair: given for pair in pairs}
    source_dir = config.get("CourseDirectory", {}).get("source_directory", "source")
    normal: dict[tuple[str, str], float | None] = {}
    measure: dict[tuple[str, str], tuple[str, str]] = {}
    for assignment, notebook in pairs:
        path = budget.solution_path(root, source_dir, assignment, notebook)
        if not path.is_file():
            normal[(assignment, notebook)] = None
            report.notes.append(f"{assignment}/{notebook}: no solution at {path} to time; "
                                f"its budget is two timeouts")
            continue
        text = path.read_text(encoding="utf-8")
        digest = budget.digest(text)
        normal[(assignment, notebook)] = budget.recorded(url, assignment, notebook, digest)
        if normal[(assignment, notebook)] is None:
            measure[(assignment, notebook)] = (text, digest)
    if measure:
        futures = {pair: client.submit(measure_solution, {
            "text": text, "timeout": timeout, "memory_mb": memory_mb, "deny": [str(root)]},
            pure=False, key=f"measure-{pair[0]}-{pair[1]}-{digest[:12]}")
            for pair, (text, digest) in measure.items()}
        for pair, future in futures.items():
            try:
                normal[pair] = future.result()
            except Exception as exc:
                report.notes.append(f"{pair[0]}/{pair[1]}: its solution could not be timed "
                                    f"({exc}); its budget is two timeouts")
                continue
            budget.record(url, pair[0], pair[1], measure[pair][1], normal[pair])
    out = {}
    for pair in pairs:
        out[pair] = budget.budget_for(normal[pair], timeout)
        if normal[pair] is not None:
            report.notes.append(f"{pair[0]}/{pair[1]}: the solution's answers take "
                                f"{normal[pair]:.1f} s; budget {out[pair]:.0f} s per submission")
    return out


def _run(client: Any, root: Path, config: Any, url: str, todo: list[Submission],
         fps: dict, budgets: dict, timeout: float, memory_mb: int, progress: bool,
         report: Report) -> None:
    """Send one task per submission and write each result once, as it arrives."""
    from distributed import as_completed

    write_here = not gbk.is_postgres(url)
    jobs = [{"student": s.student, "assignment": s.assignment, "url": url, "config": config,
             "notebooks": _read_notebooks(s, gbk.notebooks_of(url, s.assignment)),
             "budget": {nb: b for (a, nb), b in budgets.items() if a == s.assignment},
             "fingerprint": fps[s.key], "write": not write_here, "deny": [str(root)],
             "timeout": timeout, "memory_mb": memory_mb} for s in todo]
    futures = [client.submit(grade_submission, job, pure=False,
                             key=f"grade-{job['student']}-{job['assignment']}-{job['fingerprint'][:12]}")
               for job in jobs]
    bar = _bar(len(futures), progress)
    recorded: set[tuple[str, str]] = set()
    for future in as_completed(futures):
        job = jobs[futures.index(future)]
        key = (job["student"], job["assignment"])
        try:
            res = future.result()
        except Exception as exc:
            res = {"lines": [], "seconds": 0.0,
                   "error": f"the grading task failed: {type(exc).__name__}: {exc}"}
        if key in recorded:                       # a rescheduled task's second answer
            continue
        recorded.add(key)
        autograded = root / "autograded" / key[0] / key[1]
        if res["error"] is not None:
            outcome = Outcome(*key, status.UNGRADED, [res["error"]] + res["lines"],
                              reason=res["error"], seconds=res.get("seconds", 0.0))
            status.write(url, *key, {nb: (status.UNGRADED, res["error"])
                                     for nb in job["notebooks"]}, job["fingerprint"])
            gbk.forget_autograded(autograded)
        else:
            kind = status.fold([(k, d, "") for k, d in res["states"].values()])[0]
            outcome = Outcome(*key, kind, list(res["lines"]), seconds=res["seconds"])
            if write_here:
                gbk.record(url, *key, res["graded"], config, res["states"], job["fingerprint"],
                           res["seconds"])
            gbk.write_autograded(autograded, res["graded"])
        report.outcomes.append(outcome)
        bar.update(1)
    bar.close()


def _assignment_names(url: str) -> list[str]:
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        return [a.name for a in gb.assignments]


def _cfg(config: Any, name: str, default: Any) -> Any:
    section = config.get("CleanRoomExecute", {})
    return section.get(name, default) if hasattr(section, "get") else default


def _timestamp(folder: Path):
    from nbgrader.coursedir import CourseDirectory

    stamp = folder / "timestamp.txt"
    if not stamp.is_file():
        return None
    return CourseDirectory().get_existing_timestamp(str(folder))


def _read_notebooks(sub: Submission, names: list[str]) -> dict[str, str | None]:
    out = {}
    for name in names:
        path = sub.folder / f"{name}.ipynb"
        out[name] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return out


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="submission", desc="grading", disable=not enabled,
                file=sys.stderr)


def _short(reason: str) -> str:
    """A table cell's few words for why a submission is ungraded."""
    for key, words in (("not a readable notebook", "not a notebook"),
                       ("memory limit", "memory limit"), ("task failed", "task failed"),
                       ("clean room", "grader failed"), ("unknown assignment", "unknown")):
        if key in reason:
            return words
    return "not graded"


def table(report: Report) -> str:
    """Students x assignments: score/max (`!` tampering caught, `late`), or why it is not
    graded (`x` and a few words; never a score)."""
    keys = set(report.scores) | set(report.states) | {(o.student, o.assignment)
                                                      for o in report.outcomes}
    assignments = sorted({a for _, a in keys})
    students = sorted({s for s, _ in keys})
    ran = {(o.student, o.assignment): o for o in report.outcomes}
    cells = {}
    for key in ((s, a) for s in students for a in assignments):
        state = report.states.get(key)
        outcome = ran.get(key)
        if outcome is not None and not outcome.graded:
            cells[key] = f"x {_short(outcome.reason)}"
        elif state is not None and not state.graded:
            cells[key] = f"x {_short(state.detail)}"
        elif key in report.scores and report.scores[key][0] is not None:
            score, top = report.scores[key]
            mark = "!" if state is not None and state.kind == status.TAMPERING else ""
            late = " late" if state is not None and state.late else ""
            cells[key] = f"{score:g}/{top:g}{mark}{late}"
        else:
            cells[key] = "-"
    width = max([len("student")] + [len(s) for s in students])
    cols = [max([len(a)] + [len(cells[(s, a)]) for s in students]) for a in assignments]
    lines = ["  ".join(["student".ljust(width)] + [a.ljust(c) for a, c in zip(assignments, cols)])
             .rstrip()]
    for s in students:
        lines.append("  ".join([s.ljust(width)] + [cells[(s, a)].ljust(c)
                                                   for a, c in zip(assignments, cols)]).rstrip())
    return "\n".join(lines)
