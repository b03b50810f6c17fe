"""Grading a student's whole course vs executing the solution notebooks.

Targets: grading with nbgrader (`autograde` of every assignment, then `export`) costs no more
than about 1.5x running the same notebooks plainly with nbclient (issue 6), and the whole
course, every clinic case included, grades in at most 10 minutes per student on one core
(issue 14: the notebooks run torch on one thread, and nbgrader grades them one at a time).
Both sides run here in one process, one after the other, on the same notebooks; the per
notebook times, the total per student and the ratio are printed.

    .venv/bin/python benchmarks/bench_grading.py [--repeat N]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lesson.course.learner.catalog import load_exercises  # noqa: E402
from lesson.course.learner.clinics import clinic_cases  # noqa: E402
from lesson.course.learner.classroom import (autograde, copy_course, export_grades,  # noqa: E402
                                      generate_release, submit)
from lesson.course.learner.runner import run_notebook  # noqa: E402


def execute_solutions() -> dict[str, float]:
    """Seconds to run each solution notebook once in a fresh kernel."""
    seconds = {}
    for ex in load_exercises():
        start = time.perf_counter()
        result = run_notebook(ex.solution(ROOT), timeout=1200)
        seconds[ex.name] = time.perf_counter() - start
        if not result.passed:
            raise SystemExit(f"{ex.name}: the solution does not pass; fix it first")
    return seconds


def grade_one_student(workdir: Path) -> float:
    """Seconds for nbgrader to autograde and export one student who submitted everything."""
    root = copy_course(ROOT, workdir / "course")
    generate_release(root)                    # once per class, not per student: not timed
    for ex in load_exercises():
        submit(root, "student", ex.name, ex.solution(ROOT))
    start = time.perf_counter()
    # an explicit budget: the default times each solution once per gradebook, a cost per
    # class (like generate_release), not per student
    autograde(root, "--CleanRoomExecute.budget=3600")
    grades = export_grades(root)
    seconds = time.perf_counter() - start
    full = all(score == top for (who, _), (score, top) in grades.items() if who == "student")
    if not full:
        raise SystemExit(f"the solutions did not score full marks: {grades}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the best of each side")
    args = parser.parse_args()
    runs, graded = [], []
    for _ in range(args.repeat):
        runs.append(execute_solutions())
        with tempfile.TemporaryDirectory() as tmp:
            graded.append(grade_one_student(Path(tmp)))
    best = {name: min(r[name] for r in runs) for name in runs[0]}
    plain = min(sum(r.values()) for r in runs)
    for name, seconds in best.items():
        print(f"  {name:<26} {seconds:6.1f} s")
    print(f"notebooks: {len(best)}, clinic cases: {len(clinic_cases())}")
    print(f"execute the solution notebooks (nbclient): {plain:7.1f} s")
    print(f"grade one student (autograde + export):   {min(graded):7.1f} s")
    print(f"ratio grading / executing: {min(graded) / plain:.2f}x (target <= 1.5x)")
    print(f"course grading time per student: {min(graded) / 60:.1f} min on one core "
          f"(target <= 10 min)")


if __name__ == "__main__":
    main()
