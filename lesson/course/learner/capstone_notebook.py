"""The capstone's notebook, generated from the program it grades (`broken_models.capstone`):
the instructor's version in `solutions/capstone_gpt/`, whose model answers are the program's
fixed version and the codes of `lesson.course.capstone.BUGS`. `make release` makes the
student's version; a test fails when the written notebook differs from a fresh one.

    python -m lesson.course.learner.capstone_notebook [--check]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import nbformat

from lesson.course.capstone import BUGS, HIDDEN_SEEDS, VAL_LOSS_RANGE, VISIBLE_SEED, program_source
from lesson.course.learner.clinic_notebooks import _cell

FOLDER, NOTEBOOK = "capstone_gpt", "capstone.ipynb"
#: points per cause named, per bug fixed, for the healthy program
CAUSE_POINTS, FIX_POINTS, HEALTHY_POINTS = 1, 2, 3
ORDINALS = ("first", "second", "third", "fourth")

INTRO = """# Capstone: a small GPT that trains, samples, and is wrong

The program below is what a first GPT usually looks like: a configuration block, a character
tokenizer, batches cut from a text (a few kilobytes of public-domain English shipped with the
course), a transformer, a training loop with a cosine schedule, an evaluation and a greedy
sampler. It runs, and its loss falls fast. It holds {bugs} bugs of the kind the sixth clinic
taught. The report may name more than one cause at a time, and a bug can hide another: while
it is in the program the debugger cannot see the other, and once it is fixed, the other
shows. Start with the cause the report puts first.

Work the way you would on your own model, one round at a time:

1. run the program under the debugger: `outcome = broken_gpt(seed=0)` (it takes a few
   seconds), then `outcome.debugger.print_report()`, and look at `outcome.metrics`: the
   held-out loss per character, the samples, and the program's own checks;
2. add the code of the **cause** the report puts first to `causes` (a consequence is true of
   the run, but it is not the diagnosis), then fix that bug in your copy of the program,
   `repaired_gpt(seed)`;
3. run your copy again and read the new report from the top. Repeat until the report is
   empty.

The grade counts each bug: {cause_points} point for each cause you name (in any order), {fix_points}
for each bug your program no longer has, and {healthy_points} when the repaired program is healthy:
no finding, a held-out loss between {low} and {high} nats per character, on seed {visible} and on seeds
you have not seen. Each bug is judged by what your program does, not by how you wrote the fix.
The lines that measure (the debugger, the evaluation and samples at the end) are the
examiner's: keep them word for word, and the set-up too (the optimizer's rate, the number of
steps). `nndebug check capstone` runs the tests from the terminal."""

SETUP = """import math
import warnings

import torch
from torch import nn

from broken_models.case import Outcome
from lesson import CODES
from lesson.course.capstone import cause_found, judge_causes, run_program, show_program

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
show_program(into=globals())"""

CAUSES = """# causes = ["<the code of the first cause>", ...]   (in the order the debugger names them)
### BEGIN SOLUTION
causes = {codes}
### END SOLUTION"""

CAUSE_TEST = """for verdict in judge_causes(causes):
    print(verdict.message)
assert cause_found(causes, {number}), \\
    "the {ordinal} cause the debugger names is not in causes (at most {bugs} codes)\""""

REPAIR = """# def repaired_gpt(seed: int) -> Outcome: <the printed program, with its bugs fixed>
### BEGIN SOLUTION
{solution}### END SOLUTION"""

FIX_TEST = """run = run_program(repaired_gpt, seed={visible})
print(run.summary())
assert not run.changed, f"the repair changed what the bugs are not in: {{run.changed}}"
assert run.bug_gone({number}), "the {ordinal} bug is still in the program: run it and read the report"
### BEGIN HIDDEN TESTS
for seed in {hidden}:
    run = run_program(repaired_gpt, seed=seed)
    assert run.bug_gone({number}), f"seed {{seed}}: the {ordinal} bug shows: {{run.summary()}}"
### END HIDDEN TESTS"""

HEALTHY_TEST = """run = run_program(repaired_gpt, seed={visible})
print(run.summary())
assert run.healthy, f"not healthy yet: {{run.summary()}}"
### BEGIN HIDDEN TESTS
for seed in {hidden}:
    run = run_program(repaired_gpt, seed=seed)
    assert run.healthy, f"seed {{seed}}: {{run.summary()}}"
### END HIDDEN TESTS"""


def capstone_notebook() -> nbformat.NotebookNode:
    """The instructor's notebook of the capstone."""
    n = len(BUGS)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}}
    low, high = VAL_LOSS_RANGE
    cells = [
        _cell("markdown", "intro", INTRO.format(
            bugs=("two", "three", "four")[n - 2] if 2 <= n <= 4 else n, cause_points=CAUSE_POINTS,
            fix_points=FIX_POINTS, healthy_points=HEALTHY_POINTS, low=low, high=high,
            visible=VISIBLE_SEED)),
        _cell("code", "setup", SETUP),
        _cell("markdown", "causes-card", "## The causes, in the order the debugger names them"),
        _cell("code", "causes", CAUSES.format(codes=json.dumps([bug.code for bug in BUGS])),
              solution=True),
    ]
    for i in range(n):
        cells.append(_cell("code", f"test_cause_{i + 1}", CAUSE_TEST.format(
            number=i + 1, ordinal=ORDINALS[i], bugs=n), grade=True, points=CAUSE_POINTS))
    cells += [
        _cell("markdown", "repair-card", "## The repaired program\n\nCopy the printed program "
              "here, rename it `repaired_gpt`, and fix one bug per round."),
        _cell("code", "repaired_gpt", REPAIR.format(
            solution=program_source("fixed", "repaired_gpt")), solution=True),
    ]
    # the first test trains the program on the visible seed and the first hidden one, the
    # second on the other hidden seed: every later test reads those runs (one per seed)
    for i in range(n):
        hidden = HIDDEN_SEEDS[:1] if i == 0 else HIDDEN_SEEDS
        cells.append(_cell("code", f"test_fix_{i + 1}", FIX_TEST.format(
            number=i + 1, ordinal=ORDINALS[i], visible=VISIBLE_SEED, hidden=hidden),
            grade=True, points=FIX_POINTS))
    cells.append(_cell("code", "test_healthy", HEALTHY_TEST.format(
        visible=VISIBLE_SEED, hidden=HIDDEN_SEEDS), grade=True, points=HEALTHY_POINTS))
    nb.cells = cells
    return nb


def notebook_path(root: Path) -> Path:
    return Path(root) / "solutions" / FOLDER / NOTEBOOK


def rendered() -> str:
    """The notebook's file content, exactly as `write` writes it."""
    return nbformat.writes(capstone_notebook()) + "\n"


def stale(root: Path) -> bool:
    """Whether the notebook under `root` is missing or differs from a fresh generation."""
    path = notebook_path(root)
    return not path.is_file() or path.read_text(encoding="utf-8") != rendered()


def write(root: Path) -> Path:
    path = notebook_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rendered(), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the capstone's notebook of solutions/ "
                                     "from its program (then `make release`).")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the course repository")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the notebook is stale")
    args = parser.parse_args(argv)
    if args.check:
        if stale(args.root):
            print(f"stale: {notebook_path(args.root)}")
            return 1
        return 0
    print(f"wrote {write(args.root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
