"""`nndebug grade`: grade a whole class on Dask, into nbgrader's gradebook.

Run it in the course folder (beside nbgrader_config.py). Exit status:

- 0 every submission was graded;
- 1 some could not be (they are listed, with why; the rest is graded and kept);
- 2 a usage error (an option out of range, an unknown assignment or student);
- 3 the infrastructure failed (the gradebook's database, the Dask scheduler, the course
  folder): one line that says what and what to do; `--debug` adds the traceback.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_UNGRADED, EXIT_USAGE, EXIT_INFRASTRUCTURE = 0, 1, 2, 3


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                        help="assignments to grade (default: every one submitted)")
    parser.add_argument("--student", action="append", metavar="ID", dest="students",
                        help="regrade just this student (repeatable), changed or not")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="a local Dask cluster with N worker processes (default: cores)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="an existing Dask cluster instead of a local one")
    parser.add_argument("--db", metavar="URL", help="gradebook: the course's gradebook.db "
                        "(default) or postgresql://USER@HOST:PORT/DB")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds a cell or a call of a student function may run")
    parser.add_argument("--budget", type=float, metavar="S",
                        help="seconds the student's code may run over a whole notebook "
                        "(default: 4 times the solution's, at least two timeouts)")
    parser.add_argument("--memory", type=int, metavar="MB", help="memory per submission")
    parser.add_argument("--force", action="store_true", help="regrade every submission")
    parser.add_argument("--export", type=Path, metavar="FILE.csv",
                        help="write the grades as CSV (nbgrader's columns and a status)")
    parser.add_argument("--feedback", action="store_true",
                        help="then write HTML feedback (hidden tests left out)")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an infrastructure failure")
    parser.add_argument("--root", type=Path, default=Path("."), help=argparse.SUPPRESS)
    parser.add_argument("--connect-timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)


def _usage(message: str) -> int:
    print(f"nndebug grade: {message}", file=sys.stderr)
    return EXIT_USAGE


def _failed(message: str, advice: str, debug: bool) -> int:
    if debug and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc()
    print(f"nndebug grade: {message}. What to do: {advice}"
          + ("" if debug else " (--debug shows the traceback)"), file=sys.stderr)
    return EXIT_INFRASTRUCTURE


def _checked(args: argparse.Namespace) -> str | None:
    """What is wrong with the options on their own, if anything."""
    if args.workers is not None and args.workers < 1:
        return "--workers must be at least 1"
    if args.workers is not None and args.scheduler:
        return "give --workers or --scheduler, not both"
    for name, value in (("--timeout", args.timeout), ("--memory", args.memory),
                        ("--budget", args.budget)):
        if value is not None and value <= 0:
            return f"{name} must be positive"
    if args.export is not None and not args.export.resolve().parent.is_dir():
        return f"--export {args.export}: no folder {args.export.resolve().parent}"
    return None


def run(args: argparse.Namespace) -> int:
    import os

    from .quiet import quiet_sqlalchemy

    quiet_sqlalchemy()
    # nbgrader's Gradebook runs the `alembic` executable that sits next to this interpreter
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    from .engine import Infrastructure, Usage

    root = args.root.resolve()
    wrong = _checked(args)
    if wrong:
        return _usage(wrong)
    if not (root / "nbgrader_config.py").is_file():
        return _failed(f"no nbgrader_config.py in {root}",
                       "run nndebug grade in the course folder (where nbgrader_config.py "
                       "is)", args.debug)
    try:
        return _grade(root, args)
    except Usage as exc:
        return _usage(str(exc))
    except Infrastructure as exc:
        return _failed(str(exc), exc.advice, args.debug)
    except KeyboardInterrupt:
        print("nndebug grade: interrupted; what was graded is kept, run it again to go on",
              file=sys.stderr)
        return 130
    except Exception as exc:
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, SQLAlchemyError):
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[:1]
            return _failed(f"the gradebook failed: {' '.join(detail)}",
                           "check that the database server is up and reachable, then run "
                           "nndebug grade again (what was graded is kept)", args.debug)
        return _failed(f"failed: {type(exc).__name__}: {exc}",
                       "run again with --debug and report the traceback", args.debug)


def _grade(root: Path, args: argparse.Namespace) -> int:
    from .engine import grade_class, table
    from .export import export_csv
    from .feedback import generate_feedback
    from .gradebook import db_url

    report = grade_class(root, args.assignments, workers=args.workers,
                         scheduler=args.scheduler, db=args.db, timeout=args.timeout,
                         memory_mb=args.memory, budget=args.budget, students=args.students,
                         force=args.force, progress=not args.no_progress,
                         connect_timeout=args.connect_timeout)
    for note in report.notes:
        print(note)
    for o in sorted(report.outcomes, key=lambda o: (o.student, o.assignment)):
        for line in o.lines:
            print(f"{o.student}/{o.assignment}: {line}")
    if report.skipped:
        print(f"{len(report.skipped)} unchanged submissions skipped (--force regrades them, "
              f"--student ID one student)")
    print()
    print(table(report))
    tamperers = sorted({(o.student, o.assignment) for o in report.outcomes if o.tampering})
    if tamperers:
        print("\ntampering caught (0 on the tests it touched): "
              + ", ".join(f"{s}/{a}" for s, a in tamperers))
    print(f"\n{sum(o.graded for o in report.outcomes)} graded, {len(report.ungraded)} could not "
          f"be graded, in {report.seconds:.0f} s")
    url = db_url(root, args.db)
    if args.export:
        rows = export_csv(url, args.export)
        print(f"grades written to {args.export} ({rows} rows; ungraded ones have no score)")
    if args.feedback:
        graded = sorted({o.assignment for o in report.outcomes if o.graded})
        failed = generate_feedback(root, url, graded)
        print(f"feedback written to {root / 'feedback'}"
              + (f"; it failed for {', '.join(failed)}" if failed else ""))
    if report.ungraded:
        print(f"nndebug grade: {len(report.ungraded)} submissions could not be graded: "
              + ", ".join(f"{o.student}/{o.assignment} ({o.reason[:80]})"
                          for o in sorted(report.ungraded, key=lambda o: (o.student, o.assignment)))
              + ". What to do: fix or ask for them, then run nndebug grade again (they are "
              "retried, the rest is kept)", file=sys.stderr)
        return EXIT_UNGRADED
    return EXIT_OK
