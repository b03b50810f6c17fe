"""`nndebug grade`: grade a whole class on Dask, into nbgrader's gradebook.

Run it in the course folder (beside nbgrader_config.py). Exit status: 0 when every submission
was graded, 1 when some could not be (they are listed), 2 on a usage error.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                        help="assignments to grade (default: every one submitted)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="a local Dask cluster with N worker processes (default: cores)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="an existing Dask cluster instead of a local one")
    parser.add_argument("--db", metavar="URL", help="gradebook: the course's gradebook.db "
                        "(default) or postgresql://USER@HOST:PORT/DB")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds a cell or a call of a student function may run")
    parser.add_argument("--memory", type=int, metavar="MB", help="memory per submission")
    parser.add_argument("--force", action="store_true", help="regrade every submission")
    parser.add_argument("--export", type=Path, metavar="FILE.csv",
                        help="write the grades as CSV (student, assignment, score, max)")
    parser.add_argument("--feedback", action="store_true",
                        help="then run nbgrader generate_feedback for the graded assignments")
    parser.add_argument("--root", type=Path, default=Path("."), help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)


def _usage(message: str) -> int:
    print(f"nndebug grade: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore", module="nbgrader")   # SQLAlchemy chatter from its API
    warnings.filterwarnings("ignore", module="sqlalchemy")
    import os

    # nbgrader's Gradebook runs the `alembic` executable that sits next to this interpreter
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    from .engine import grade_class, table
    from .gradebook import db_url, export_csv

    root = args.root.resolve()
    if not (root / "nbgrader_config.py").is_file():
        return _usage(f"no nbgrader_config.py in {root}: run it in the course folder")
    if args.workers is not None and args.workers < 1:
        return _usage("--workers must be at least 1")
    if args.workers is not None and args.scheduler:
        return _usage("give --workers or --scheduler, not both")
    for name, value in (("--timeout", args.timeout), ("--memory", args.memory)):
        if value is not None and value <= 0:
            return _usage(f"{name} must be positive")
    try:
        db_url(root, args.db)
        report = grade_class(root, args.assignments, workers=args.workers,
                             scheduler=args.scheduler, db=args.db, timeout=args.timeout,
                             memory_mb=args.memory, force=args.force,
                             progress=not args.no_progress)
    except ValueError as exc:
        return _usage(str(exc))
    for o in sorted(report.outcomes, key=lambda o: (o.student, o.assignment)):
        for line in o.lines:
            print(f"{o.student}/{o.assignment}: {line}")
    if report.skipped:
        print(f"{len(report.skipped)} unchanged submissions skipped (--force regrades them)")
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
        export_csv(url, args.export)
        print(f"grades written to {args.export}")
    if args.feedback:
        _feedback(root, url, sorted({o.assignment for o in report.outcomes if o.graded}))
    if report.ungraded:
        print("could not be graded: " + ", ".join(f"{o.student}/{o.assignment}"
                                                  for o in report.ungraded), file=sys.stderr)
        return 1
    return 0


def _feedback(root: Path, url: str, assignments: list[str]) -> None:
    import os
    import subprocess

    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]))
    for assignment in assignments:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", assignment,
                        "--force", f"--CourseDirectory.db_url={url}"], cwd=root, env=env,
                       check=False, capture_output=True)
    print(f"feedback written to {root / 'feedback'}")
