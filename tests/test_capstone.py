"""The capstone: a small GPT with three bugs, one hiding another, graded per bug.

Fast tests check the program against its answer key (three hunks, one per bug), the notebook
(generated, its release naming no bug) and the judges (causes, changed measuring lines). The
slow ones train the program at each stage of the repair: the debugger names one cause at a
time, a partial repair loses exactly the points of the bugs it left, the full repair is
healthy. (`tests/test_course.py` grades the notebook itself with nbgrader.)
"""
from __future__ import annotations

import difflib
from pathlib import Path

import nbformat
import pytest

import broken_models.capstone as program
from lesson.course import capstone
from lesson.course.capstone import BUGS, cause_found, changes, judge_causes, run_program
from lesson.course.learner import capstone_notebook
from lesson.findings import CODES, EXPLAINS

ROOT = Path(__file__).resolve().parents[1]

#: (stage, seed) -> why the debugger misses that stage's cause today: a strict expected
#: failure, to be removed when the debugger sees it (issue 29, branch seqdbg)
KNOWN_TOOL_ISSUES: dict[tuple[int, int], str] = {}


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def _hunks() -> list[tuple[list[str], list[str], int, int]]:
    """The diff from the broken program to the fixed one, hunk by hunk: (old lines, new
    lines, where the old ones start and end)."""
    broken = capstone.program_source("broken", "repaired_gpt").splitlines(keepends=True)
    fixed = capstone.program_source("fixed", "repaired_gpt").splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, broken, fixed).get_opcodes()
    return [(broken[i1:i2], fixed[j1:j2], i1, i2) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def partial_program(fixes: set[int], name: str = "repaired_gpt") -> str:
    """The broken program with the fixes of bugs `fixes` (1-based) applied, named `name`."""
    broken = capstone.program_source("broken", name).splitlines(keepends=True)
    out, prev = [], 0
    for number, (old, new, i1, i2) in enumerate(_hunks(), 1):
        out += broken[prev:i1] + (new if number in fixes else old)
        prev = i2
    return "".join(out + broken[prev:])


def compiled(source: str, name: str = "repaired_gpt"):
    """A function defined from `source` with the program module's helpers, as the notebook
    defines a student's cell (its source readable by inspect, as the clean room's is)."""
    import linecache

    filename = f"<capstone {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {k: v for k, v in vars(program).items() if not k.startswith("__")}
    exec(compile(source, filename, "exec"), ns)
    return ns[name]


# -- the program and its answer key ----------------------------------------------------------

def test_the_program_differs_from_its_fix_in_one_hunk_per_bug():
    hunks = _hunks()
    assert len(hunks) == len(BUGS) == 3
    assert all(1 <= len(old) <= 8 and 1 <= len(new) <= 8 for old, new, *_ in hunks)
    lines = len(capstone.program_source().splitlines())
    assert 100 <= lines <= 200, lines         # one realistic script: data to sampling
    assert partial_program({1, 2, 3}) == capstone.program_source("fixed", "repaired_gpt")


def test_the_bugs_are_sequence_codes_and_the_report_agrees_on_their_consequences():
    for bug in BUGS:
        assert bug.code in CODES and set(bug.consequences) <= set(CODES)
        assert set(bug.consequences) <= set(EXPLAINS.get(bug.code, ())), bug.code


# -- the notebook -----------------------------------------------------------------------------

def test_the_committed_notebook_is_the_generated_one():
    assert not capstone_notebook.stale(ROOT), \
        "run: python -m lesson.course.learner.capstone_notebook, then make release"


def test_the_release_names_no_bug_and_hides_the_unseen_seeds():
    released = nbformat.read(ROOT / "exercises" / "capstone_gpt" / "capstone.ipynb", as_version=4)
    text = "\n".join(c.source for c in released.cells)
    for bug in BUGS:
        assert bug.code not in text
    assert "HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text
    for seed in capstone.HIDDEN_SEEDS:
        assert f"seed={seed}" not in text and f"({seed}," not in text
    points = [c.metadata["nbgrader"].get("points", 0) for c in released.cells
              if c.metadata.get("nbgrader", {}).get("grade")]
    assert sum(points) == 3 * 1 + 3 * 2 + 3


# -- the judges -------------------------------------------------------------------------------

def test_causes_are_judged_in_any_order_without_naming_the_missing_ones():
    codes = [bug.code for bug in BUGS]
    assert all(cause_found(codes[::-1], n) for n in (1, 2, 3))
    partial = [codes[1], "LR_TOO_HIGH", "learning rate"]
    assert [cause_found(partial, n) for n in (1, 2, 3)] == [False, True, False]
    kinds = [v.kind for v in judge_causes(partial)]
    assert kinds == ["cause", "unrelated", "not a code"]
    for verdict in judge_causes(partial):
        assert codes[0] not in verdict.message and codes[2] not in verdict.message
    assert [v.kind for v in judge_causes([codes[0].lower()])] == ["cause"]   # any letter case
    assert judge_causes(codes[0])[0].kind == "not a code"        # a string, not a list
    everything = list(CODES)
    assert not any(cause_found(everything, n) for n in (1, 2, 3)), "listing every code"
    assert [v.kind for v in judge_causes([codes[0], codes[0]])] == ["cause", "repeated"]


def test_changes_name_the_measuring_lines_and_the_set_up_a_repair_touched():
    fixed = capstone.program_source("fixed", "repaired_gpt")
    assert changes(compiled(fixed)) == []
    faked = fixed.replace('"samples_alone_agree": sum(a == s for a, s in zip(alone, samples)) '
                          '/ len(prompts),', '"samples_alone_agree": 1.0,')
    assert faked != fixed and any("samples_alone_agree" in c for c in changes(compiled(faked)))
    slower = fixed.replace("steps, lr, weight_decay = 300, 1e-2, 0.1",
                           "steps, lr, weight_decay = 300, 1e-3, 0.1")
    assert changes(compiled(slower)) == ["keep: steps, lr, weight_decay = 300, 1e-2, 0.1"]


@pytest.mark.slow
def test_a_repair_is_told_the_set_up_it_changed_however_it_wrote_it():
    """The set-up is read from the run (lesson.course.learner.run_setup), not from the text:
    a loop cut short and a rate lowered after the optimizer is built are both seen."""
    fixed = capstone.program_source("fixed", "repaired_gpt")
    shorter = fixed.replace("for step in range(steps):", "for step in range(steps // 3):")
    run = run_program(compiled(shorter), seed=0)
    assert run.changed == ["fewer steps: AdamW steps 100 times, where the training runs 300 "
                           "steps"], run.changed
    assert not run.healthy and not run.bug_gone(1)
    built = "    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)\n"
    slower = fixed.replace(built, "    for group in optimizer.param_groups:\n"
                                  "        group[\"lr\"] = group[\"lr\"] / 10\n" + built)
    assert slower != fixed and changes(compiled(slower)) == []
    run = run_program(compiled(slower), seed=0)
    assert any("learning rate of AdamW lowered from 0.01 to 0.001" in c for c in run.changed)


# -- the stages of the repair (trains the program) --------------------------------------------

def _stage_params() -> list:
    params = []
    for stage in range(len(BUGS) + 1):
        reason = KNOWN_TOOL_ISSUES.get((stage, 0))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        params.append(pytest.param(stage, id=f"{stage}-fixed", marks=marks))
    return params


@pytest.mark.slow
@pytest.mark.parametrize("stage", _stage_params())
def test_the_debugger_names_one_cause_at_a_time(stage):
    """With the first `stage` bugs fixed, the report's first finding is the next bug's cause;
    the others are what it explains or bugs still in the program; with all fixed, nothing."""
    run = run_program(compiled(partial_program(set(range(1, stage + 1)))), seed=0)
    if stage == len(BUGS):
        assert run.codes == [] and run.healthy, run.summary()
        return
    bug = BUGS[stage]
    assert run.codes and run.codes[0] == bug.code, run.summary()
    left = {code for later in BUGS[stage:] for code in (later.code, *later.consequences)}
    assert set(run.codes) <= left, run.summary()


@pytest.mark.slow
def test_a_partial_repair_loses_the_points_of_the_bug_it_left():
    """Bugs 1 and 3 fixed, the attention left as it was: the leak is judged present by the
    program's own causality check, the other two gone, the program not healthy."""
    run = run_program(compiled(partial_program({1, 3})), seed=0)
    assert [run.bug_gone(n) for n in (1, 2, 3)] == [True, False, True], run.summary()
    assert not run.healthy
    broken = run_program(compiled(partial_program(set())), seed=0)
    assert [broken.bug_gone(n) for n in (1, 2, 3)] == [False, False, False], broken.summary()
    assert broken.metrics["val_loss"] > 5 and broken.metrics["final_loss"] < 0.1   # the symptom


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, *capstone.HIDDEN_SEEDS])
def test_the_fixed_program_is_healthy_on_the_graded_seeds(seed):
    run = run_program(program.train_fixed, seed)
    assert run.healthy, run.summary()
