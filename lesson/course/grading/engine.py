"""A class graded in parallel on dask.distributed, into nbgrader's gradebook.

`grade_class` finds every submission under `submitted/<student>/<assignment>/` that is new
or changed since it was last graded, and sends one task per submission to a Dask cluster (an
embedded LocalCluster, or an existing one by address). A worker runs nbgrader's own sanitize
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
from .gradebook import Submission

#: nbgrader's own sanitize steps, then ours in place of Execute, then its output filters
SANITIZE = ("nbgrader.preprocessors.ClearOutput", "nbgrader.preprocessors.DeduplicateIds",
            "nbgrader.preprocessors.OverwriteKernelspec", "nbgrader.preprocessors.OverwriteCells",
            "nbgrader.preprocessors.CheckCellMetadata")
AUTOGRADE = ("lesson.course.grading.preprocessor.CleanRoomExecute",
             "nbgrader.preprocessors.IgnorePattern",
             "nbconvert.preprocessors.ClearMetadataPreprocessor",
             "nbgrader.preprocessors.LimitOutput")


@dataclass
class Outcome:
    """What happened to one submission."""

    student: str
    assignment: str
    graded: bool
    lines: list[str] = field(default_factory=list)
    tampering: bool = False
    seconds: float = 0.0


@dataclass
class Report:
    """The class's run: outcomes, skipped (unchanged) submissions, the gradebook's scores."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    scores: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
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
    """A worker's task: grade one submission's notebooks (sent as text); JSON-ready result."""
    import nbformat

    start = time.monotonic()
    config = job["config"]
    result: dict[str, Any] = {"student": job["student"], "assignment": job["assignment"],
                              "graded": {}, "lines": [], "tampering": False, "error": None}
    for name, text in job["notebooks"].items():
        if text is None:
            result["lines"].append(f"{name}.ipynb was not submitted: its tests score 0")
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
                    pp.deny, pp.deny_cwd = job["deny"], False   # a worker's cwd is not the course
                nb, resources = pp(nb, resources)   # honours `enabled`, as nbconvert does
        except Exception as exc:
            result["error"] = f"{name}.ipynb could not be graded ({type(exc).__name__}: {exc})"
            return result
        tampering = resources.get("nndebug", {}).get("tampering", {})
        for label, reasons in tampering.items():
            result["tampering"] = True
            result["lines"].append(f"TAMPERING in {label}: " + "; ".join(reasons)[:300])
        for index, cell in enumerate(nb.cells):
            label = (cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
                     or f"cell {index}")
            for out in cell.get("outputs", []):
                if _reportable(out):
                    result["lines"].append(f"{label}: {out['evalue'][:200]}")
        result["graded"][name] = nb
    if job["write"]:
        gbk.record(job["url"], job["student"], job["assignment"], result["graded"], config)
    result["seconds"] = time.monotonic() - start
    return result


def _reportable(out: dict) -> bool:
    """An error output the instructor should see in the report: a limit hit (time, memory),
    a sandbox that died, or the clean room itself failing."""
    if out.get("output_type") != "error":
        return False
    name = out.get("ename")
    return name in ("TimeoutError", "GraderError", "MemoryError") or (
        name == "RuntimeError" and "sandbox" in out.get("evalue", ""))


def _client(workers: int | None, scheduler: str | None):
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="30s"), None
    import os

    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=None, memory_limit=0, silence_logs=40)
    return Client(cluster), cluster


def grade_class(root: Path, assignments: list[str] | None = None, *, workers: int | None = None,
                scheduler: str | None = None, db: str | None = None, timeout: float | None = None,
                memory_mb: int | None = None, force: bool = False, progress: bool = True,
                client: Any = None) -> Report:
    """Grade the class in `root`; see the module's docstring."""
    from distributed import as_completed

    start = time.monotonic()
    root = Path(root).resolve()
    config = load_config(root)
    course_url = gbk.db_url(root, None)
    url = gbk.db_url(root, db)
    gbk.ensure_assignments(url, course_url)
    assignments = list(assignments or [])
    known = {a for a in _assignment_names(url)}
    unknown = [a for a in assignments if a not in known]
    if unknown:
        raise ValueError(f"no assignment {', '.join(unknown)} in the gradebook (known: "
                         f"{', '.join(sorted(known))}); run nbgrader generate_assignment first")
    report = Report()
    todo, fps = [], {}
    for sub in discover(root, assignments):
        if sub.assignment not in known:
            report.outcomes.append(Outcome(sub.student, sub.assignment, False,
                                           [f"unknown assignment {sub.assignment}"]))
            continue
        fp = gbk.fingerprint(sub.folder)
        done = gbk.graded_fingerprint(root / "autograded" / sub.student / sub.assignment)
        if not force and done == fp:
            report.skipped.append(sub.key)
            continue
        todo.append(sub)
        fps[sub.key] = fp
    stamps = {s.key: _timestamp(s.folder) for s in todo}
    gbk.prepare(url, todo, stamps)
    write_here = not gbk.is_postgres(url)
    limits = {"timeout": timeout or _cfg(config, "timeout", 60.0),
              "memory_mb": memory_mb or int(_cfg(config, "memory_mb", 3072))}
    jobs = [{"student": s.student, "assignment": s.assignment, "url": url, "config": config,
             "notebooks": _read_notebooks(s, gbk.notebooks_of(url, s.assignment)),
             "write": not write_here, "deny": [str(root)], **limits} for s in todo]
    own = client is None
    cluster = None
    if own and jobs:
        client, cluster = _client(workers, scheduler)
    try:
        if not jobs:
            raise _Nothing
        _prewarm(client)
        futures = [client.submit(grade_submission, job, pure=False,
                                 key=f"grade-{job['student']}-{job['assignment']}-{fps[(job['student'], job['assignment'])][:12]}")
                   for job in jobs]
        bar = _bar(len(futures), progress)
        recorded: set[tuple[str, str]] = set()
        for future in as_completed(futures):
            try:
                res = future.result()
            except Exception as exc:
                job = jobs[futures.index(future)]
                report.outcomes.append(Outcome(job["student"], job["assignment"], False,
                                               [f"the grading task failed: {type(exc).__name__}: {exc}"]))
                bar.update(1)
                continue
            key = (res["student"], res["assignment"])
            if key in recorded:                   # a rescheduled task's second answer
                continue
            recorded.add(key)
            outcome = Outcome(res["student"], res["assignment"], res["error"] is None,
                              list(res["lines"]), res["tampering"], res.get("seconds", 0.0))
            if res["error"] is not None:
                outcome.lines.insert(0, res["error"])
            else:
                if write_here:
                    gbk.record(url, res["student"], res["assignment"], res["graded"], config)
                gbk.write_autograded(root / "autograded" / res["student"] / res["assignment"],
                                     res["graded"], fps[key])
            report.outcomes.append(outcome)
            bar.update(1)
        bar.close()
    except _Nothing:
        pass
    finally:
        if own and client is not None:
            client.close()
            if cluster is not None:
                cluster.close()
    report.scores = gbk.scores(url)
    report.seconds = time.monotonic() - start
    return report


def _prewarm(client: Any) -> None:
    """Have every worker start its zygote (`zygote.py`) while the tasks are being sent: the
    first notebook then finds torch imported. A worker that cannot is left to start one when
    its first notebook comes."""
    from .zygote import prewarm

    try:
        client.run(prewarm)
    except Exception:
        pass


class _Nothing(Exception):
    """No submission is new or changed: nothing to send to a cluster."""


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


def table(report: Report) -> str:
    """Students x assignments: score/max, with `!` for tampering and `x` for ungraded."""
    assignments = sorted({a for _, a in report.scores} | {o.assignment for o in report.outcomes})
    students = sorted({s for s, _ in report.scores} | {o.student for o in report.outcomes})
    marks = {(o.student, o.assignment): ("x" if not o.graded else "!" if o.tampering else "")
             for o in report.outcomes}
    cells = {}
    for s in students:
        for a in assignments:
            if marks.get((s, a)) == "x":
                cells[(s, a)] = "x"
            elif (s, a) in report.scores:
                score, top = report.scores[(s, a)]
                cells[(s, a)] = f"{score:g}/{top:g}{marks.get((s, a), '')}"
            else:
                cells[(s, a)] = "-"
    width = max([len("student")] + [len(s) for s in students])
    cols = [max([len(a)] + [len(cells[(s, a)]) for s in students]) for a in assignments]
    lines = ["  ".join(["student".ljust(width)] + [a.ljust(c) for a, c in zip(assignments, cols)])]
    for s in students:
        lines.append("  ".join([s.ljust(width)] + [cells[(s, a)].ljust(c)
                                                   for a, c in zip(assignments, cols)]))
    return "\n".join(lines)
