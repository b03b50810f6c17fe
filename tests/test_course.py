"""The nbgrader course, graded for real: generate, submit, autograde and export on a simulated
class in a temporary copy of the course (real nbgrader, real kernels)."""
from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from lesson.course.grading.simulated import FAULTS
from lesson.course.learner.catalog import Exercise, load_exercises
from lesson.course.learner.classroom import (autograde_each, cell_grades, clone, copy_course,
                                      export_grades, generate_release, gradebook_scores, submit)
from lesson.course.learner.clinics import find_clinic_case

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = load_exercises()
NAMES = [e.name for e in EXERCISES]


def L(case: str) -> str:
    """A catalogue case's neutral clinic label (the answer cell's id): "dead_relu" -> "case1_3"."""
    return find_clinic_case(case).ident


def T(case: str, part: str) -> str:
    """The grade id of a case's diagnosis or repair test."""
    return f"test_{L(case)}_{part}"


def D(case: str, old: str, new: str) -> tuple[str, str]:
    """An edit of the solution's diagnosis line for `case`."""
    return f'diagnosis["{L(case)}"] = "{old}"', f'diagnosis["{L(case)}"] = "{new}"'

#: Plausible wrong answers, at least two per assignment: (student, exercise, answer cell id,
#: edit, test cell that must lose points). An edit is the cell's new source, or an
#: (old, new) replacement in the solution's source, or ("broken", case, edits): the
#: catalogue's broken script with small edits, renamed as the student's repair. Answers given to
#: one student target test cells that do not call each other's functions. In a clinic, a wrong
#: student hands in the release with only its wrong answers filled in (`_handed_in`).
#: a learning rate divided by 10 after the optimizer is built, however the script sets it
LOWER_RATE = ("    with NetworkDebugger(", "    for group in optimizer.param_groups:\n"
              "        group[\"lr\"] /= 10\n    with NetworkDebugger(")
WRONG: list[tuple[str, str, str, object, str]] = [
    ("wrong", "ex1_exploding_gradients", "exploding_steps",  # off-by-one threshold
     ("if total_grad_norm(r) > threshold", "if total_grad_norm(r) >= threshold"),
     "test_exploding_steps"),
    ("wrong", "ex1_exploding_gradients", "suggest_clip_value",  # hard-coded visible answer
     "def suggest_clip_value(history, percentile=10.0):\n    return 3.0\n",
     "test_suggest_clip_value"),
    ("wrong2", "ex1_exploding_gradients", "suggest_clip_value",  # per-parameter norms pooled
     ("    norms = [n for n in map(total_grad_norm, history) if math.isfinite(n)]\n",
      "    norms = [p['grad_norm'] for r in history for p in r['params'].values()\n"
      "             if p['grad_norm'] is not None and math.isfinite(p['grad_norm'])]\n"),
     "test_suggest_clip_value"),
    ("wrong2", "ex3_lr_finder", "find_best_lr",  # the example's answer, no sweep run
     'resnet_csv = WORK / "resnet.csv"\nresnet_png = WORK / "resnet.png"\nbest_lr = 0.05\n',
     "test_best_lr"),
    ("wrong", "ex2_dead_neurons", "dead_units",  # the lesson's rule: over half the outputs 0
     ("(h == 0).all(dim=0)", "(h == 0).float().mean(dim=0) > 0.5"), "test_dead_units"),
    ("wrong", "ex2_dead_neurons", "resurrect",  # Xavier instead of Kaiming
     ('nn.init.kaiming_normal_(fresh, nonlinearity="relu")', "nn.init.xavier_normal_(fresh)"),
     "test_resurrect"),
    ("wrong", "ex3_lr_finder", "read_lr_csv",  # columns by position, not by name
     "def read_lr_csv(path):\n"
     "    rows = list(csv.reader(open(path)))[1:]\n"
     "    return [float(r[0]) for r in rows], [float(r[1]) for r in rows]\n",
     "test_read_lr_csv"),
    ("wrong", "ex3_lr_finder", "pick_lr",  # one step before the minimum instead of / 10
     ("return lrs[int(np.argmin(losses))] / 10", "return lrs[int(np.argmin(losses)) - 1]"),
     "test_pick_lr"),
    ("wrong", "ex4_data_validator", "validate",  # imbalance flagged at 10:1 already
     ("if ratio > 10:", "if ratio >= 10:"), "test_validate_example"),
    ("wrong2", "ex4_data_validator", "validate",  # a validator that always says healthy
     "def validate(x_train, y_train, x_test, y_test):\n    return []\n", "test_corrupted"),
    ("wrong", "ex5_gradient_check", "numerical_gradient",  # forgets to put the value back
     ("        array[i] = saved\n", ""), "test_numerical_gradient"),
    ("wrong2", "ex5_gradient_check", "locate_bad_parameter",  # hard-coded visible answer
     "def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n    return '2.weight'\n",
     "test_locate"),
    ("wrong", "clinic1_not_learning", L("missing_zero_grad"),  # a consequence, not the cause
     D("missing_zero_grad", "MISSING_ZERO_GRAD", "LR_TOO_HIGH"), T("missing_zero_grad", "diagnosis")),
    ("wrong", "clinic1_not_learning", L("dead_relu"),  # lowers the learning rate, keeps the bug
     ("broken", "dead_relu", [LOWER_RATE]), T("dead_relu", "repair")),
    ("wrong", "clinic2_nan_inf", L("log_of_zero"),  # turns the NaN into 0: silences the symptom
     ("broken", "log_of_zero", [("return -(", "return torch.nan_to_num(-("),
                                ("torch.log(1 - p)).mean()",
                                 "torch.log(1 - p)).mean(), nan=0.0, posinf=0.0)")]),
     T("log_of_zero", "repair")),
    ("wrong2", "clinic2_nan_inf", L("log_of_zero"),  # a lower rate: the log meets no 0 in time
     ("broken", "log_of_zero", [LOWER_RATE]), T("log_of_zero", "repair")),
    ("wrong", "clinic2_nan_inf", L("softmax_overflow"),  # skips the steps whose loss is Inf
     ("broken", "softmax_overflow", [("break  # stop at the first NaN, before it reaches the "
                                      "weights", "continue")]), T("softmax_overflow", "repair")),
    ("wrong", "clinic3_bad_model", L("test_rows_in_train"),  # switches the validator off
     ("broken", "test_rows_in_train", [("findings = validate_data(data.x_train, data.y_train, "
                                        "data.x_val, data.y_val)", "findings = []")]),
     T("test_rows_in_train", "repair")),
    ("wrong", "clinic3_bad_model", L("labels_shuffled"),  # a plausible but wrong diagnosis
     D("labels_shuffled", "LABELS_SHUFFLED", "LABEL_NOISE"), T("labels_shuffled", "diagnosis")),
    ("wrong", "clinic4_pytorch", L("double_softmax"),  # trains harder, keeps the softmax
     ("broken", "double_softmax", [("lr=1e-2", "lr=1e-1")]), T("double_softmax", "repair")),
    ("wrong", "clinic4_pytorch", L("nll_on_logits"),  # softmax, not log-softmax, before NLLLoss
     ("broken", "nll_on_logits", [("nn.Linear(32, 10))", "nn.Linear(32, 10), nn.Softmax(dim=1))")]),
     T("nll_on_logits", "repair")),
    ("wrong", "clinic5_backward", L("custom_function_transpose"),  # names the symptom's tool
     D("custom_function_transpose", "GRADIENT_MISMATCH", "VANISHING_GRADIENT"),
     T("custom_function_transpose", "diagnosis")),
    ("wrong", "clinic5_backward", L("miniframework_transpose"),  # the broken backward, kept
     ("broken", "miniframework_transpose", []), T("miniframework_transpose", "repair")),
    ("wrong", "clinic6_sequence", L("padding_mask_inverted"),  # a consequence, not the cause
     D("padding_mask_inverted", "PADDING_MASK_INVERTED", "ATTENTION_ON_PADDING"),
     T("padding_mask_inverted", "diagnosis")),
    ("wrong", "clinic6_sequence", L("gru_last_step"),  # reads the first step instead of the last
     ("broken", "gru_last_step", [("out[:, -1]", "out[:, 0]")]), T("gru_last_step", "repair")),
    ("wrong", "capstone_gpt", "causes",  # a learning rate blamed for the second cause
     ('"CAUSAL_LEAK"', '"LR_TOO_HIGH"'), "test_cause_2"),
    ("wrong2", "capstone_gpt", "repaired_gpt",  # two bugs fixed, the attention mask left
     ("attn_mask=~self.future[:t, :t]", "attn_mask=self.future[:t, :t]"), "test_fix_2"),
]


def _solution_source(exercise: str, cell_id: str) -> str:
    ex = next(e for e in EXERCISES if e.name == exercise)
    nb = nbformat.read(ex.solution(ROOT), as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def _broken_repair(case: str, edits: list[tuple[str, str]]) -> str:
    """The catalogue's broken script with `edits`, offered as the student's repair."""
    from broken_models import CATALOGUE

    module = importlib.import_module(CATALOGUE[case].module)
    source = textwrap.dedent(inspect.getsource(module.train_broken))
    for old, new in edits:
        assert old in source, (case, old)
        source = source.replace(old, new)
    code = CATALOGUE[case].expected[0]
    return (f'diagnosis["{L(case)}"] = "{code}"\n\n'
            + source.replace("def train_broken(", f"def repaired_{L(case)}(", 1))


def _wrong_source(exercise: str, cell_id: str, edit: object) -> str:
    if isinstance(edit, str):
        return edit
    if edit[0] == "broken":
        return _broken_repair(edit[1], edit[2])
    old, new = edit
    source = _solution_source(exercise, cell_id)
    assert old in source, (exercise, cell_id, old)
    return source.replace(old, new)


def _wrong_answers(student: str, exercise: str) -> list[tuple[str, str, str]]:
    """(cell id, source, target test) of one wrong student's answers to one assignment."""
    return [(cell_id, _wrong_source(name, cell_id, edit), target)
            for who, name, cell_id, edit, target in WRONG if (who, name) == (student, exercise)]


def _handed_in(ex: Exercise, root: Path) -> Path:
    """The notebook a wrong student edits: in a clinic the release (its cases are independent,
    so the unanswered ones score 0 and cost no training, as in
    lesson/course/grading/simulated.py), elsewhere the solution (answers call each other)."""
    return ex.released(root) if ex.name.startswith("clinic") else ex.solution(ROOT)


def _edited(path: Path, replacements: dict[str, str], target: Path) -> Path:
    """A copy of the notebook at `path` with some cells' sources replaced."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.get("id") in replacements:
            cell.source = replacements[cell["id"]]
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return target


def _notebook_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# -- fast checks on the committed course -----------------------------------------------------

def test_metadata_lists_every_assignment_in_both_folders():
    for folder in ("solutions", "exercises"):
        on_disk = sorted(p.name for p in (ROOT / folder).iterdir() if p.is_dir())
        assert on_disk == sorted(NAMES), f"{folder}/ and exercises.toml disagree"
    for ex in EXERCISES:
        assert ex.solution(ROOT).is_file() and ex.released(ROOT).is_file(), ex.name
        assert len(ex.hints) >= 2, f"{ex.name}: give at least two hints"


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_committed_notebooks_carry_no_outputs(folder):
    notebooks = sorted((ROOT / folder).rglob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (path, cell.get("id"))
        assert nb.metadata["kernelspec"]["name"] == "python3", path


def test_exercise_3_teaches_the_rule_the_finder_applies_to_its_sweep(tmp_path, monkeypatch):
    """Exercise 3's ResNet is swept with SGD and momentum: the finder reads that sweep by its
    STEEPEST rule, and the rule the exercise teaches (fastai's lowest loss / 10) lands within
    4x of the finder's suggestion on the solution's own sweep; the text says which rule the
    finder uses for which optimizer."""
    from lesson.checks.lr_suggestion import choose_lr, smooth

    monkeypatch.setenv("NNDEBUG_DATA_DIR", "")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    nb = nbformat.read(ROOT / "solutions" / "ex3_lr_finder" / "lr_finder.ipynb", as_version=4)
    ns: dict = {}
    for cell in nb.cells:            # the solution's code, without the test cells
        if cell.cell_type == "code" and not cell.metadata["nbgrader"].get("grade"):
            exec(cell.source, ns)
    lrs, losses = ns["read_lr_csv"](ns["resnet_csv"])
    finder = choose_lr(lrs, smooth(losses), 10, losses, plain_sgd=False, classification=True)
    assert finder.kind == "steepest" and ns["result"].kind == "steepest"
    assert finder.lr == pytest.approx(ns["result"].suggested_lr, rel=1e-3)
    # the sweep's float rounding differs by CPU: 1/3-3 on CI's machine, 0.265 on an AMD EPYC
    assert 1 / 4 <= ns["best_lr"] / finder.lr <= 4
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for words in ("momentum and Adam", "a third of the edge", "Plain SGD without momentum",
                  "result.rule"):
        assert words in text


def test_every_assignment_has_hidden_tests_and_locked_tests():
    for ex in EXERCISES:
        nb = nbformat.read(ex.solution(ROOT), as_version=4)
        tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert tests, ex.name
        assert all(c.metadata["nbgrader"]["locked"] for c in tests), ex.name
        assert any("### BEGIN HIDDEN TESTS" in c.source for c in tests), ex.name
        released = nbformat.read(ex.released(ROOT), as_version=4)
        assert not any("HIDDEN TESTS" in c.source or "BEGIN SOLUTION" in c.source
                       for c in released.cells), f"{ex.name}: the release leaks answers"


@pytest.mark.slow
def test_every_wrong_answer_targets_a_real_cell():
    for student, name, cell_id, edit, target in WRONG:
        ex = next(e for e in EXERCISES if e.name == name)
        ids = {c.get("id") for c in nbformat.read(ex.solution(ROOT), as_version=4).cells}
        assert {cell_id, target} <= ids, (name, cell_id, target)
        assert _wrong_source(name, cell_id, edit) != _solution_source(name, cell_id)
    for name in NAMES:
        assert len([w for w in WRONG if w[1] == name]) >= 2, f"{name}: two wrong answers"


# -- the simulated class -------------------------------------------------------------------

#: ex1 with an endless loop in one function (for an empty history), and a library-style
#: warning on stderr from another, which must not cost a point (IgnorePattern).
LOOPER = ("ex1_exploding_gradients", {
    "suggest_clip_value": FAULTS[("looper", "ex1_exploding_gradients")][1]["suggest_clip_value"],
    "total_grad_norm":
        "import sys\n\n"
        "def total_grad_norm(record):\n"
        "    print('UserWarning: this is how torch warns on stderr', file=sys.stderr)\n"
        "    norms = [p['grad_norm'] for p in record['params'].values() if p['grad_norm'] is not None]\n"
        "    return math.sqrt(sum(n * n for n in norms))\n",
})
TAMPERER = ("ex4_data_validator", "validate", "def validate(x_train, y_train, x_test, y_test):\n"
            "    return []\n", "test_validate_example", "print('all tests pass')\n")


#: Students graded together (one nbgrader autograde each, the two groups side by side): the
#: model student's every solution takes as long as all the others together, the looper's
#: minute of waiting included. Two course copies, not more: each copy costs an nbgrader run
#: per assignment it holds when its feedback is made.
GRADERS = [["model"], ["looper", "wrong", "blank", "wrong2", "tamperer"]]


def _grade_class(base: Path):
    """A course copy with its release generated and a class of simulated students, graded in
    clones of the course (so graders run side by side); the model student's grades exported.

    Returns (course root, {student: that student's course copy}, {(student, assignment):
    (score, max_score)})."""
    root = copy_course(ROOT, base / "course")
    generate_release(root)
    drafts = base / "drafts"
    submissions: dict[str, list[tuple[str, Path]]] = {"model": [], "blank": []}
    for ex in EXERCISES:
        submissions["model"].append((ex.name, ex.solution(ROOT)))
        submissions["blank"].append((ex.name, ex.released(root)))
    for student, name in sorted({(w[0], w[1]) for w in WRONG}):
        ex = next(e for e in EXERCISES if e.name == name)
        answers = {cell: src for cell, src, _ in _wrong_answers(student, name)}
        submissions.setdefault(student, []).append(
            (name, _edited(_handed_in(ex, root), answers, drafts / student / name / ex.notebook)))
    name, answers = LOOPER
    ex = next(e for e in EXERCISES if e.name == name)
    submissions["looper"] = [(name, _edited(ex.solution(ROOT), answers,
                                            drafts / "looper" / ex.notebook))]
    name, cell, source, test_cell, test_source = TAMPERER
    ex = next(e for e in EXERCISES if e.name == name)
    submissions["tamperer"] = [(name, _edited(ex.solution(ROOT), {cell: source, test_cell: test_source},
                                              drafts / "tamperer" / ex.notebook))]
    copies = {}
    for i, group in enumerate(GRADERS):
        copy = clone(root, base / f"grader-{i}")
        for student in group:
            copies[student] = copy
            for name, path in submissions.pop(student):
                submit(copy, student, name, path)
    assert not submissions, f"students without a grader: {sorted(submissions)}"
    # an explicit budget: the default would time every solution once per gradebook (2 here)
    autograde_each(list(dict.fromkeys(copies.values())), len(GRADERS),
                   "--CleanRoomExecute.budget=1800")
    grades = export_grades(copies["model"])                  # nbgrader export, for real
    assert grades == gradebook_scores(copies["model"])
    for copy in dict.fromkeys(copies.values()):
        grades.update(gradebook_scores(copy))
    return root, copies, grades


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """The graded class, built once per test run: with pytest-xdist the first worker that
    needs it grades it under a file lock and the others read its result."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return _grade_class(tmp_path_factory.mktemp("class"))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent
    summary = shared / "graded_class.json"
    with FileLock(str(shared / "graded_class.lock")):
        if not summary.is_file():
            root, copies, grades = _grade_class(shared / "class")
            summary.write_text(json.dumps({
                "root": str(root), "copies": {k: str(v) for k, v in copies.items()},
                "grades": [[s, a, score, top] for (s, a), (score, top) in grades.items()]}))
        data = json.loads(summary.read_text())
    return (Path(data["root"]), {k: Path(v) for k, v in data["copies"].items()},
            {(s, a): (score, top) for s, a, score, top in data["grades"]})


def _cells(graded, student: str, name: str) -> dict[str, tuple[float, float]]:
    _, copies, _ = graded
    ex = next(e for e in EXERCISES if e.name == name)
    return cell_grades(copies[student], student, name, Path(ex.notebook).stem)


@pytest.mark.slow
def test_exercises_folder_is_exactly_the_generated_release(graded_class):
    root, _, _ = graded_class
    generated = sorted(p.relative_to(root / "exercises") for p in (root / "exercises").rglob("*")
                       if p.is_file())
    committed = sorted(p.relative_to(ROOT / "exercises") for p in (ROOT / "exercises").rglob("*")
                       if p.is_file() and ".ipynb_checkpoints" not in p.parts)
    assert generated == committed
    for rel in generated:
        if rel.suffix == ".ipynb":
            assert _notebook_json(root / "exercises" / rel) == _notebook_json(
                ROOT / "exercises" / rel), f"exercises/{rel} differs: regenerate it (README, instructors)"
        else:
            assert (root / "exercises" / rel).read_bytes() == (ROOT / "exercises" / rel).read_bytes()


@pytest.mark.slow
def test_solutions_score_full_marks(graded_class):
    """The instructor half of the rustlings-style dev check (tests/test_learner.py has the
    learner half): every solution passes every test, hidden ones included."""
    _, _, grades = graded_class
    for name in NAMES:
        score, max_score = grades[("model", name)]
        assert max_score > 0 and score == max_score, (name, _cells(graded_class, "model", name))


@pytest.mark.slow
def test_unmodified_release_scores_zero_on_every_test_cell(graded_class):
    _, _, grades = graded_class
    for name in NAMES:
        cells = _cells(graded_class, "blank", name)
        assert cells and all(score == 0 for score, _ in cells.values()), (name, cells)
        assert grades[("blank", name)][0] == 0


@pytest.mark.slow
def test_plausible_wrong_answers_score_less_than_full(graded_class):
    _, _, grades = graded_class
    for student, name in sorted({(w[0], w[1]) for w in WRONG}):
        cells = _cells(graded_class, student, name)
        for cell_id, _, target in _wrong_answers(student, name):
            score, max_score = cells[target]
            assert score < max_score, f"{name}: the wrong {cell_id} still earns {target}"
        assert grades[(student, name)][0] < grades[(student, name)][1]


@pytest.mark.slow
def test_the_capstone_gives_points_per_bug_found_and_fixed(graded_class):
    """A repair that fixes two of the three bugs keeps their points and loses the third's and
    the healthy program's; a wrong cause loses that cause's point only."""
    partial = _cells(graded_class, "wrong2", "capstone_gpt")
    full = {k for k, (score, top) in partial.items() if score == top > 0}
    assert full == {"test_cause_1", "test_cause_2", "test_cause_3", "test_fix_1", "test_fix_3"}, partial
    assert partial["test_fix_2"][0] == partial["test_healthy"][0] == 0
    wrong_cause = _cells(graded_class, "wrong", "capstone_gpt")
    assert [k for k, (score, top) in wrong_cause.items() if score < top] == ["test_cause_2"]


@pytest.mark.slow
def test_an_endless_loop_scores_zero_for_its_cell_and_the_rest_is_graded(graded_class):
    """The loop's cell is interrupted at the timeout; every other cell keeps its points, also
    those whose code wrote a warning to stderr."""
    cells = _cells(graded_class, "looper", LOOPER[0])
    assert cells["test_suggest_clip_value"][0] == 0
    others = {k: v for k, v in cells.items() if k != "test_suggest_clip_value"}
    assert others and all(score == max_score for score, max_score in others.values()), cells


@pytest.mark.slow
def test_an_edited_test_cell_is_graded_with_the_original(graded_class):
    _, copies, _ = graded_class
    name, _, _, test_cell, _ = TAMPERER
    cells = _cells(graded_class, "tamperer", name)
    assert cells[test_cell][0] == 0, cells
    graded = copies["tamperer"] / "autograded" / "tamperer" / name
    nb = nbformat.read(next(graded.glob("*.ipynb")), as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == test_cell)
    assert "all tests pass" not in source and "assert" in source


@pytest.mark.slow
def test_no_feedback_page_of_any_assignment_shows_a_hidden_test(graded_class, tmp_path):
    """Every page of every assignment, made two ways: plain `nbgrader generate_feedback`
    through the course's configuration, and `nndebug grade --feedback`'s generate_feedback,
    here on a course whose configuration forgot the hiding step."""
    from lesson.course.grading.feedback import generate_feedback, hidden_source, leaks
    from lesson.course.learner.classroom import nbgrader

    _, copies, grades = graded_class
    hidden = {ex.name: hidden_source(ex.solution(ROOT), ex.released(ROOT)) for ex in EXERCISES}
    assert all(hidden.values())
    pages = 0
    for i, copy in enumerate(dict.fromkeys(copies.values())):
        for way in ("nbgrader", "nndebug"):
            course = tmp_path / f"{way}-{i}"
            shutil.copytree(copy, course, ignore=shutil.ignore_patterns("feedback"))
            if way == "nbgrader":
                nbgrader(course, "generate_feedback", "*", "--force")
            else:
                config = course / "nbgrader_config.py"
                config.write_text(config.read_text().split("c.GenerateFeedback")[0])
                assert "HideHiddenTests" not in config.read_text()
                graded = sorted({p.name for p in (course / "autograded").glob("*/*")})
                assert not generate_feedback(course, f"sqlite:///{course / 'gradebook.db'}",
                                             graded)
            for ex in EXERCISES:
                for page in (course / "feedback").glob(f"*/{ex.name}/*.html"):
                    assert not leaks(page, hidden[ex.name]), (way, page)
                    pages += 1
    assert pages == 2 * len(grades)
