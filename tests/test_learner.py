"""The learner loop (`nndebug exercises | check | hint | watch`) and the rustlings-style dev
check: every released exercise fails its checks and every solution passes them."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from lesson.course.learner import commands
from lesson.course.learner.catalog import find_course_root, find_exercise, load_exercises
from lesson.course.learner.progress import DONE, FAILING, NOT_STARTED, Progress, notebook_hash
from lesson.course.learner.runner import CheckResult, CellResult, _cell_failed, _failure_message, run_notebook

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = load_exercises()


def course_copy(tmp_path: Path, names: list[str] | None = None) -> Path:
    """A learner's checkout: the config and the released notebooks (some of them)."""
    root = tmp_path / "course"
    (root / "exercises").mkdir(parents=True)
    shutil.copy2(ROOT / "nbgrader_config.py", root)
    for ex in EXERCISES:
        if names is None or ex.name in names:
            shutil.copytree(ROOT / "exercises" / ex.name, root / "exercises" / ex.name)
    return root


def solve(root: Path, name: str) -> Path:
    """Do what a learner does: fill the released notebook's answer cells with the solution."""
    ex = find_exercise(name, EXERCISES)
    answers = {c.id: c.source for c in nbformat.read(ex.solution(ROOT), as_version=4).cells}
    path = ex.released(root)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers[cell.id]
    nbformat.write(nb, path)
    return path


def cli(command: str, root: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    commands.add_arguments(parser, command)
    args = parser.parse_args(["--course-dir", str(root), *argv])
    args.command = command
    return commands.run(args)


def no_kernel(*_args, **_kwargs):
    raise AssertionError("this should not have run a notebook")


# -- the metadata ------------------------------------------------------------------------------

def test_exercises_are_listed_in_order_with_hints():
    names = [e.name for e in EXERCISES]
    assert names[:5] == ["ex1_exploding_gradients", "ex2_dead_neurons", "ex3_lr_finder",
                         "ex4_data_validator", "ex5_gradient_check"]
    assert all(n.startswith("clinic") for n in names[5:-1]) and len(names) > 6
    assert names[-1] == "capstone_gpt"          # after the clinics: it builds on the sixth
    assert all(e.notebook.endswith(".ipynb") and e.title and e.hints for e in EXERCISES)


def test_find_exercise_by_name_or_unique_prefix():
    assert find_exercise("ex3", EXERCISES).name == "ex3_lr_finder"
    assert find_exercise("clinic2_nan_inf", EXERCISES).notebook == "nan_inf.ipynb"
    with pytest.raises(ValueError, match="more than one"):
        find_exercise("ex", EXERCISES)
    with pytest.raises(ValueError, match="no exercise"):
        find_exercise("ex9", EXERCISES)


def test_course_root_is_found_from_a_subfolder(tmp_path):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])
    assert find_course_root(root / "exercises" / "ex1_exploding_gradients") == root.resolve()
    with pytest.raises(ValueError, match="no course found"):
        find_course_root(tmp_path)


# -- progress, hints ---------------------------------------------------------------------------

def test_progress_survives_a_restart_and_a_damaged_file(tmp_path):
    progress = Progress(tmp_path)
    progress.get("ex1_exploding_gradients").status = DONE
    progress.save()
    assert Progress(tmp_path).get("ex1_exploding_gradients").status == DONE
    assert (tmp_path / ".nndebug" / "progress.json").is_file()
    (tmp_path / ".nndebug" / "progress.json").write_text("{not json")
    assert Progress(tmp_path).get("ex1_exploding_gradients").status == NOT_STARTED


def test_hint_shows_one_more_each_time_and_remembers(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex2_dead_neurons"])
    hints = find_exercise("ex2", EXERCISES).hints
    for i in range(len(hints)):
        assert cli("hint", root, "ex2") == 0
        out = capsys.readouterr().out
        assert f"Hint {i + 1} of {len(hints)}" in out and hints[i] in out
        if i + 1 < len(hints):
            assert hints[i + 1] not in out
    assert cli("hint", root, "ex2") == 0
    out = capsys.readouterr().out
    assert "No more hints" in out and all(h in out for h in hints)
    assert Progress(root).get("ex2_dead_neurons").hints_shown == len(hints)


def test_check_and_hint_without_a_name_take_the_first_exercise_not_done(tmp_path, capsys,
                                                                       monkeypatch):
    """Like `watch` (and rustlings): no name means the current exercise, in course order."""
    root = course_copy(tmp_path, names=["ex1_exploding_gradients", "ex2_dead_neurons"])
    first, second = EXERCISES[0], EXERCISES[1]
    assert cli("hint", root) == 0
    assert f"Hint 1 of {len(first.hints)} for {first.name}" in capsys.readouterr().out
    assert Progress(root).get(first.name).hints_shown == 1
    checked = []
    monkeypatch.setattr(commands, "check", lambda r, ex, *a, **k: checked.append(ex.name) or 0)
    assert cli("check", root) == 0 and checked == [first.name]
    progress = Progress(root)
    progress.get(first.name).status = DONE
    progress.save()
    assert commands.current_exercise(root, EXERCISES) == second
    assert cli("hint", root) == 0
    assert Progress(root).get(second.name).hints_shown == 1
    assert cli("check", root) == 0 and checked == [first.name, second.name]
    progress = Progress(root)
    for ex in EXERCISES:
        progress.get(ex.name).status = DONE
    progress.save()
    capsys.readouterr()
    assert cli("check", root) == 0 and len(checked) == 2
    assert "Every exercise passes" in capsys.readouterr().out


def test_unknown_exercise_is_a_clear_error(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex2_dead_neurons"])
    assert cli("hint", root, "nope") == 2
    assert "no exercise matches 'nope'" in capsys.readouterr().out


# -- the table -----------------------------------------------------------------------------

@pytest.mark.slow  # imports nbgrader (its checksums tell an untouched notebook)
def test_untouched_notebooks_are_not_started_without_running_anything(tmp_path, capsys, monkeypatch):
    root = course_copy(tmp_path)
    monkeypatch.setattr(commands, "run_notebook", no_kernel)
    assert cli("exercises", root) == 0
    out = capsys.readouterr().out
    for ex in EXERCISES:
        assert any(ex.name in line and NOT_STARTED in line for line in out.splitlines())
    assert "0/%d done" % len(EXERCISES) in out


def test_table_reruns_changed_notebooks_and_remembers_unchanged_ones(tmp_path, capsys, monkeypatch):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients", "ex2_dead_neurons"])
    solve(root, "ex1")
    calls = []

    def fake_run(path):
        calls.append(Path(path).name)
        return CheckResult(Path(path), [CellResult("t1", 2, True), CellResult("t2", 3, True)])

    monkeypatch.setattr(commands, "run_notebook", fake_run)
    monkeypatch.setattr(commands, "load_exercises",
                        lambda: [e for e in EXERCISES if e.name.startswith(("ex1", "ex2"))])
    assert cli("exercises", root) == 0
    assert calls == ["exploding_gradients.ipynb"]          # ex2 is untouched: not run
    out = capsys.readouterr().out
    assert "ex1_exploding_gradients" in out and "done" in out and "5/5" in out
    monkeypatch.setattr(commands, "run_notebook", no_kernel)  # unchanged: remembered
    assert cli("exercises", root) == 0
    assert "1/2 done" in capsys.readouterr().out


def test_an_unreadable_notebook_is_marked_and_named_and_the_table_still_shows(tmp_path, capsys,
                                                                              monkeypatch):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients", "ex2_dead_neurons"])
    find_exercise("ex1", EXERCISES).released(root).write_text("")
    monkeypatch.setattr(commands, "run_notebook", no_kernel)
    monkeypatch.setattr(commands, "load_exercises",
                        lambda: [e for e in EXERCISES if e.name.startswith(("ex1", "ex2"))])
    assert cli("exercises", root) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("ex1_exploding_gradients" in ln and commands.UNREADABLE in ln for ln in lines)
    assert any("ex2_dead_neurons" in ln and NOT_STARTED in ln for ln in lines)
    assert any("exercises/ex1_exploding_gradients/exploding_gradients.ipynb cannot be read" in ln
               for ln in lines)


@pytest.mark.parametrize("damage", ["empty", "cut short"])
def test_check_says_which_notebook_cannot_be_read_why_and_how_to_get_it_back(tmp_path, capsys,
                                                                            monkeypatch, damage):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])
    path = find_exercise("ex1", EXERCISES).released(root)
    text = "" if damage == "empty" else path.read_text()[:2000]
    path.write_text(text)
    if damage == "cut short":
        (root / ".git").mkdir()                   # a git checkout of the course
    monkeypatch.setattr(commands, "run_notebook", no_kernel)
    assert cli("check", root, "ex1") == 2
    out = capsys.readouterr().out
    rel = "exercises/ex1_exploding_gradients/exploding_gradients.ipynb"
    assert f"{rel} cannot be read: the file is {damage}" in out
    assert (f"git checkout -- {rel}" in out) == (damage == "cut short")
    assert ("fetch the notebook again" in out) == (damage == "empty")
    assert path.read_text() == text               # nothing of the learner's is overwritten


def test_failure_message_names_the_error_or_the_failing_line():
    err = {"output_type": "error", "ename": "AssertionError", "evalue": "",
           "traceback": ["\x1b[31mAssertionError\x1b[39m",
                         "Cell In[3], line 2\n      1 x = 1\n----> 2 assert x == 2\n"]}
    assert _failure_message([err]) == "AssertionError\n    failing line: assert x == 2"
    named = {"output_type": "error", "ename": "NameError", "evalue": "name 'f' is not defined",
             "traceback": []}
    assert _failure_message([named]) == "NameError: name 'f' is not defined"
    crashed = {"output_type": "error", "ename": "TypeError",
               "evalue": "unsupported operand type(s) for ** or pow(): 'NoneType' and 'int'",
               "traceback": ["Cell In[7], line 3\n      2 record = {'params': {'w': None}}\n"
                             "----> 3 assert total_grad_norm([record]) == 0\n",
                             "Cell In[4], line 5, in total_grad_norm(history)\n"
                             "----> 5     return math.sqrt(sum(n ** 2 for n in norms))\n"]}
    assert _failure_message([crashed]) == (
        "TypeError: unsupported operand type(s) for ** or pow(): 'NoneType' and 'int'\n"
        "    failing line: assert total_grad_norm([record]) == 0\n"
        "    raised at: return math.sqrt(sum(n ** 2 for n in norms))")
    warning = {"output_type": "stream", "name": "stderr", "text": "UserWarning: meh\n"}
    assert not _cell_failed([warning])
    assert _cell_failed([{"output_type": "stream", "name": "stderr", "text": "boom\n"}])


# -- watch ---------------------------------------------------------------------------------------

def test_watch_rechecks_when_the_notebook_is_saved(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients", "ex2_dead_neurons"])
    ex1, ex2 = EXERCISES[0], EXERCISES[1]
    checked = []
    outcomes = iter([1, 0, 1])          # ex1 fails, then passes after a save; then ex2 fails

    def checker(r, exercise):
        checked.append(exercise.name)
        code = next(outcomes)
        if code == 0:
            progress = Progress(r)
            progress.get(exercise.name).status = DONE
            progress.save()
        return code

    sleeps = []

    def sleep(seconds):                  # the learner edits and saves the notebook while we wait
        sleeps.append(seconds)
        for ex in (ex1, ex2):
            _edit_an_answer(ex.released(root))

    code = commands.watch(root, [ex1, ex2], None, interval=0.5, max_checks=3, sleep=sleep,
                          checker=checker)
    assert code == 0
    assert checked == ["ex1_exploding_gradients", "ex1_exploding_gradients", "ex2_dead_neurons"]
    assert sleeps and all(s == 0.5 for s in sleeps)


def _edit_an_answer(path):
    import json
    import os

    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell["source"] = "".join(cell["source"]) + "\n# my attempt"
    path.write_text(json.dumps(nb))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_watch_leaves_an_untouched_notebook_not_started(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])
    ex1 = EXERCISES[0]
    checked, sleeps = [], []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:             # a few polls later the learner edits and saves
            _edit_an_answer(ex1.released(root))

    code = commands.watch(root, [ex1], None, interval=0.5, max_checks=1, sleep=sleep,
                          checker=lambda r, e: checked.append(e.name) or 1)
    assert code == 0 and checked == ["ex1_exploding_gradients"] and len(sleeps) == 3
    out = capsys.readouterr().out
    assert "not started" in out and "FAIL" not in out
    assert Progress(root).get(ex1.name).status == NOT_STARTED


def test_watch_waits_for_a_save_while_the_notebook_cannot_be_read(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])
    ex1 = EXERCISES[0]
    path = ex1.released(root)
    whole = path.read_text()
    path.write_text(whole[:2000])                 # saved half-way
    checked = []

    def sleep(_):                                 # the learner saves the whole notebook
        path.write_text(whole)
        _edit_an_answer(path)

    code = commands.watch(root, [ex1], None, interval=0.5, max_checks=1, sleep=sleep,
                          checker=lambda r, e: checked.append(e.name) or 1)
    assert code == 0 and checked == ["ex1_exploding_gradients"]
    assert "exploding_gradients.ipynb cannot be read: the file is cut short" in (
        capsys.readouterr().out)


def test_an_ambiguous_prefix_lists_only_the_matching_exercises():
    with pytest.raises(ValueError) as err:
        find_exercise("clinic", EXERCISES)
    assert "clinic1_not_learning" in str(err.value) and "ex1" not in str(err.value)


def test_watch_stops_cleanly_on_ctrl_c(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])

    def sleep(_):
        raise KeyboardInterrupt

    assert commands.watch(root, EXERCISES[:1], None, 0.1, sleep=sleep,
                          checker=lambda r, e: 1) == 0
    assert "stopped watching" in capsys.readouterr().out


# -- real kernels --------------------------------------------------------------------------------

def _tiny_notebook(tmp_path: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "assert 1 + 1 == 2", metadata={"nbgrader": {"grade": True, "grade_id": "t",
                                                     "points": 1}})])
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def _dying(monkeypatch, deaths: int, after_a_cell: bool = False) -> list[int]:
    """Make the first `deaths` kernels die (at start-up, or after running the first cell)."""
    import nbclient

    real, calls = nbclient.NotebookClient.execute, []

    def execute(self, *args, **kwargs):
        calls.append(1)
        if len(calls) <= deaths:
            if after_a_cell:
                self.nb.cells[0].execution_count = 1
            raise RuntimeError("Kernel died before replying to kernel_info")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(nbclient.NotebookClient, "execute", execute)
    return calls


def test_a_kernel_that_dies_at_start_up_is_started_again(tmp_path, monkeypatch):
    calls = _dying(monkeypatch, deaths=2)
    result = run_notebook(_tiny_notebook(tmp_path))
    assert len(calls) == 3 and result.passed and not result.error


def test_a_kernel_that_keeps_dying_at_start_up_is_reported(tmp_path, monkeypatch):
    calls = _dying(monkeypatch, deaths=10)
    result = run_notebook(_tiny_notebook(tmp_path))
    assert len(calls) == 3 and not result.passed
    assert "Kernel died before replying to kernel_info" in result.error


def test_a_kernel_that_died_after_running_code_is_not_started_again(tmp_path, monkeypatch):
    """The notebook's code may have written files or printed: running it twice is not safe."""
    calls = _dying(monkeypatch, deaths=1, after_a_cell=True)
    result = run_notebook(_tiny_notebook(tmp_path))
    assert len(calls) == 1 and "Kernel died" in result.error and not result.passed


@pytest.mark.slow
@pytest.mark.parametrize("name", [e.name for e in EXERCISES])
def test_dev_check_every_released_exercise_fails(name):
    """Like rustlings' own CI: the learner's starting point fails every visible test. (That
    every solution passes them all, hidden tests included, is graded for real by nbgrader in
    tests/test_course.py; the check below runs a solved notebook through this same runner.)"""
    released = run_notebook(find_exercise(name, EXERCISES).released(ROOT))
    assert released.tests and not released.error
    assert not any(t.passed for t in released.tests), [t.name for t in released.tests if t.passed]
    assert all(t.message for t in released.tests)


@pytest.mark.slow
def test_check_reports_each_test_and_the_first_failure_then_passes(tmp_path, capsys):
    root = course_copy(tmp_path, names=["ex5_gradient_check"])
    assert cli("check", root, "ex5") == 1
    out = capsys.readouterr().out
    assert "FAIL  test_numerical_gradient" in out and "FAIL  test_locate" in out
    assert "first failure, test_numerical_gradient" in out and "NotImplementedError" in out
    assert "nndebug hint ex5_gradient_check shows hint 1 of" in out
    assert Progress(root).get("ex5_gradient_check").status == FAILING

    solve(root, "ex5")
    assert cli("check", root, "ex5") == 0
    out = capsys.readouterr().out
    assert "PASS  test_locate" in out and "FAIL" not in out
    entry = Progress(root).get("ex5_gradient_check")
    assert entry.status == DONE and entry.notebook_hash == notebook_hash(
        find_exercise("ex5", EXERCISES).released(root))
    state = json.loads((root / ".nndebug" / "progress.json").read_text())
    assert state["ex5_gradient_check"]["status"] == "done"


def test_data_dir_must_exist_and_reaches_the_kernels_environment(tmp_path, monkeypatch, capsys):
    root = course_copy(tmp_path, names=["ex3_lr_finder"])
    monkeypatch.setenv("NNDEBUG_DATA_DIR", "")  # restored (unset) after the test
    assert cli("check", root, "ex3", "--data-dir", str(tmp_path / "missing")) == 2
    assert "is not a folder" in capsys.readouterr().out
    seen = []
    monkeypatch.setattr(commands, "run_notebook", lambda path: seen.append(
        __import__("os").environ.get("NNDEBUG_DATA_DIR")) or CheckResult(Path(path)))
    cli("check", root, "ex3", "--data-dir", str(tmp_path))
    assert seen == [str(tmp_path.resolve())]


def test_next_after_a_pass_is_the_one_exercises_names(tmp_path):
    """ex5 passed while ex4 was never started: `check` said "Next: case1_1" (the one after ex5)
    while `nndebug exercises` named ex4. Both name the first exercise not done now; after a
    clinic case, its clinic's next case still comes first."""
    progress = Progress(tmp_path)
    names = [e.name for e in EXERCISES]
    done = names[:names.index("ex5_gradient_check") + 1]
    for name in done:
        if name != "ex4_data_validator":
            progress.get(name).status = DONE
    ex5 = find_exercise("ex5_gradient_check", EXERCISES)
    assert commands.step_after(progress, ex5, EXERCISES) == "ex4_data_validator"
    progress.get("ex4_data_validator").status = DONE
    clinic = next(e for e in EXERCISES if e.cases)
    assert commands.step_after(progress, ex5, EXERCISES) == clinic.cases[0]
    case = find_exercise(clinic.cases[0], EXERCISES)
    progress.get(clinic.cases[0]).status = DONE
    assert commands.step_after(progress, case, EXERCISES) == clinic.cases[1]


@pytest.mark.slow
def test_check_on_the_capstone_counts_each_bug_found_and_fixed(tmp_path, capsys):
    """A learner one round into the capstone: the first cause named, the first bug fixed.
    `nndebug check` passes that cause's test and that bug's, and fails the others with what is
    still wrong (the program trains once, on the visible seed)."""
    from lesson.course.capstone import BUGS, program_source

    root = course_copy(tmp_path, names=["capstone_gpt"])
    path = solve(root, "capstone")
    broken = program_source("broken", "repaired_gpt")
    fixed = program_source("fixed", "repaired_gpt")
    first_fix = fixed.replace("attn_mask=~self.future", "attn_mask=self.future")
    first_fix = first_fix.replace(
        fixed[fixed.index("    @torch.no_grad()\n    def sample"):fixed.index("    # -- training")],
        broken[broken.index("    @torch.no_grad()\n    def sample"):broken.index("    # -- training")])
    assert first_fix != broken and first_fix != fixed
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.get("id") == "causes":
            cell.source = f'causes = ["{BUGS[0].code}"]\n'
        elif cell.get("id") == "repaired_gpt":
            cell.source = first_fix
    nbformat.write(nb, path)
    assert cli("check", root, "capstone") == 1
    out = capsys.readouterr().out
    for test in ("test_cause_1", "test_fix_1"):
        assert f"PASS  {test}" in out, out
    for test in ("test_cause_2", "test_cause_3", "test_fix_2", "test_fix_3", "test_healthy"):
        assert f"FAIL  {test}" in out, out
    assert "the second cause the debugger names is not in causes" in out
