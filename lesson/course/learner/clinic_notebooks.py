"""The clinic notebooks, generated from the catalogue: one nbgrader assignment per family, one
exercise per case (a diagnosis and a repair), under the case's neutral label.

The instructor's notebooks (`solutions/clinic*/`) are written by this module, never by hand:
the model answer of each case is its page's `train_fixed`, the right diagnosis its first CAUSE.
`python -m lesson.course.learner.clinic_notebooks` writes them; `make release` then makes the
student versions with nbgrader. A test fails when a written notebook differs from a fresh one.
"""
from __future__ import annotations

import argparse
import inspect
import textwrap
from pathlib import Path

import nbformat

from broken_models.case import FAMILIES
from lesson.course.learner.clinics import (ASSIGNMENTS, HIDDEN_SEEDS, VISIBLE_SEED, ClinicCase,
                                           clinic_cases)

#: points of one case's tests: the diagnosis, the repair
DIAGNOSIS_POINTS, REPAIR_POINTS = 1, 3

INTRO = """# Clinic {clinic}: {symptom}

Each case below is a training script from the course's catalogue of broken networks. It runs,
it prints a loss, and it is silently wrong. The cases are numbered, not named: finding out what
is wrong is the exercise. For each case:

1. run the cell that shows it: it prints the symptom, the target and the broken script, and
   defines that script here as `broken_caseN_M` (with the helpers it uses), so you can run it
   and copy it;
2. gather the evidence with the course's tools: `outcome = broken_caseN_M(seed=0)` trains it
   under the reference debugger (or the case's own check); read `outcome.findings`, and
   `outcome.debugger.print_report()` where a debugger watched it. `lesson.CODES[code].meaning`
   says what a code means. `nndebug hint caseN_M` gives hints, from general to specific;
3. put the code of the **cause** in `diagnosis["caseN_M"]` (a consequence of the bug is true of
   the run, but it is not the diagnosis), and write the repaired script as
   `repaired_caseN_M(seed)`, changing only what the bug needs.

The diagnosis test tells you at once whether your code names the cause, a consequence or
something unrelated, and names the case once you have found it. Your repair is graded the way
the catalogue judges its own fix: trained under the reference diagnostics on seed {visible} and
on seeds you have not seen, it passes when the diagnostics find nothing **and** the target is
reached. Whatever else fails, the repair test prints the target with the value your run
reached, and the findings. The lines that measure (the debugger, the case's check, the
metrics) are the examiner's: keep them word for word. A repair must remove the cause, not
hide the symptom: the test watches what your run is set up with (each optimizer's learning
rate, weight decay and settings, the number of steps, gradient clipping, the model's size,
the seed) and refuses a change the bug does not need, saying what you changed and what is
still there (a lower learning rate around the bug, fewer steps, clipping a gradient the bug
inflates, catching the NaN, skipping bad steps, switching a check off: none of these pass).
`nndebug check caseN_M` checks one case from the terminal."""

SETUP = """import math
import warnings

import torch
from torch import nn

from broken_models.case import Outcome
from lesson import CODES
from lesson.course.learner.clinic import judge_diagnosis, judge_repair, show_case

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
diagnosis: dict[str, str] = {}"""

ANSWER = """# diagnosis["{ident}"] = "<the code of the cause>"
# def {repair}(seed: int) -> Outcome: <the printed script, with the bug fixed>
### BEGIN SOLUTION
diagnosis["{ident}"] = "{cause}"

{solution}### END SOLUTION"""

DIAGNOSIS_TEST = """verdict = judge_diagnosis("{ident}", diagnosis.get("{ident}"))
print(verdict.message)
assert verdict.right, verdict.message"""

REPAIR_TEST = """verdict = judge_repair("{ident}", {repair}, seed={visible})
print(verdict.message)
assert verdict.passed, verdict.message
### BEGIN HIDDEN TESTS
for seed in {hidden}:
    verdict = judge_repair("{ident}", {repair}, seed=seed)
    assert verdict.passed, verdict.message
### END HIDDEN TESTS"""


def _cell(kind: str, cell_id: str, source: str, *, grade: bool = False, solution: bool = False,
          points: int | None = None) -> nbformat.NotebookNode:
    make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
    meta = {"grade": grade, "grade_id": cell_id, "locked": not solution, "schema_version": 3,
            "solution": solution}
    if points is not None:
        meta["points"] = points
    return make(source, id=cell_id, metadata={"nbgrader": meta})


def model_answer(case: ClinicCase) -> str:
    """The page's fixed script, renamed as the student's repair."""
    source = textwrap.dedent(inspect.getsource(case.case.train_fixed))
    return source.replace("def train_fixed(", f"def {case.repair}(", 1)


def case_cells(case: ClinicCase) -> list[nbformat.NotebookNode]:
    """The five cells of one case: heading, show, answer, diagnosis test, repair test."""
    fields = {"ident": case.ident, "repair": case.repair, "visible": VISIBLE_SEED,
              "hidden": HIDDEN_SEEDS, "cause": case.case.causes[0],
              "solution": model_answer(case)}
    diagnosis_id, repair_id = case.test_ids
    return [
        _cell("markdown", f"{case.ident}-card", f"## {case.heading} (`{case.ident}`)"),
        _cell("code", f"{case.ident}-show", f'show_case("{case.ident}", into=globals())'),
        _cell("code", case.ident, ANSWER.format(**fields), solution=True),
        _cell("code", diagnosis_id, DIAGNOSIS_TEST.format(**fields), grade=True,
              points=DIAGNOSIS_POINTS),
        _cell("code", repair_id, REPAIR_TEST.format(**fields), grade=True, points=REPAIR_POINTS),
    ]


def clinic_notebook(family: str) -> nbformat.NotebookNode:
    """The instructor's notebook of one family's clinic."""
    clinic = list(FAMILIES).index(family) + 1
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [
        _cell("markdown", "intro", INTRO.format(clinic=clinic, symptom=FAMILIES[family],
                                                visible=VISIBLE_SEED)),
        _cell("code", "setup", SETUP),
    ]
    for case in clinic_cases(family):
        nb.cells.extend(case_cells(case))
    return nb


def notebook_path(root: Path, family: str) -> Path:
    folder, notebook = ASSIGNMENTS[family]
    return Path(root) / "solutions" / folder / notebook


def rendered(family: str) -> str:
    """The notebook's file content, exactly as `write_all` writes it."""
    return nbformat.writes(clinic_notebook(family)) + "\n"


def stale(root: Path) -> list[Path]:
    """The clinic notebooks under `root` that are missing or differ from a fresh generation."""
    out = []
    for family in FAMILIES:
        path = notebook_path(root, family)
        if not path.is_file() or path.read_text(encoding="utf-8") != rendered(family):
            out.append(path)
    return out


def write_all(root: Path) -> list[Path]:
    """Write every clinic notebook under `root`/solutions; the paths written."""
    paths = []
    for family in FAMILIES:
        path = notebook_path(root, family)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered(family), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the clinic notebooks of solutions/ "
                                     "from the catalogue (then `make release`).")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the course repository")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a notebook is stale")
    args = parser.parse_args(argv)
    if args.check:
        out = stale(args.root)
        for path in out:
            print(f"stale: {path}")
        return 1 if out else 0
    for path in write_all(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
