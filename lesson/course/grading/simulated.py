"""A simulated class for the grading tests and the benchmark: honest, wrong, symptom-hiding
and tampering students, each a submission made by editing a solution's answer cells.

Every tampering student is one named technique (`TAMPERING`), written the way a student who
wants the points without the work would write it; in the student's own kernel (plain
nbgrader's Execute) each of them takes points it did not earn.
"""
from __future__ import annotations

import importlib
import inspect
import json
import textwrap
from pathlib import Path

from broken_models import CATALOGUE
from lesson.course.learner.clinics import find_clinic_case

#: the assignments the class hands in (the fastest notebooks of the course)
ASSIGNMENTS = {"ex1_exploding_gradients": "exploding_gradients",
               "ex5_gradient_check": "gradient_check",
               "clinic1_not_learning": "not_learning"}

def _broken(case: str, *edits: tuple[str, str]) -> str:
    """The case's broken script as the clinic prints it, renamed `repaired_<case>`, with
    `edits` (old, new) applied: answers written against the script the student is shown."""
    module = importlib.import_module(CATALOGUE[case].module)
    source = textwrap.dedent(inspect.getsource(module.train_broken))
    for old, new in edits:
        if old not in source:
            raise ValueError(f"{case}'s broken script no longer holds {old!r}")
        source = source.replace(old, new)
    return source.replace("def train_broken(", f"def repaired_{case}(", 1)


_BROKEN_MZG = _broken("missing_zero_grad")
_BROKEN_DEAD_RELU = _broken("dead_relu")

#: (student, assignment) -> {answer cell id: new source}
EDITS: dict[tuple[str, str], dict[str, str]] = {
    # -- honest work written differently from the reference: full marks -------------------
    ("honest", "ex1_exploding_gradients"): {
        "total_grad_norm":
            "import numpy as np   # imported again: harmless\n\n"
            "def _norms(record):\n"
            "    for p in record['params'].values():\n"
            "        if p['grad_norm'] is not None:\n"
            "            yield p['grad_norm']\n\n"
            "def total_grad_norm(record):\n"
            "    total = 0.0\n"
            "    for n in _norms(record):\n"
            "        total = math.hypot(total, n)\n"
            "    print('norm', total)\n"
            "    return total\n",
        "exploding_steps":
            "def exploding_steps(history, threshold):\n"
            "    steps = []\n"
            "    for record in history:\n"
            "        if total_grad_norm(record) - threshold > 0:\n"
            "            steps.append(record['step'])\n"
            "    return steps\n",
        "suggest_clip_value":
            "import matplotlib.pyplot as plt\n\n"
            "def suggest_clip_value(history, percentile=10.0):\n"
            "    norms = sorted(n for n in map(total_grad_norm, history) if math.isfinite(n))\n"
            "    if not norms:\n"
            "        raise ValueError('no finite norm yet')\n"
            "    fig, ax = plt.subplots()\n"
            "    ax.hist(norms)\n"
            "    plt.close(fig)\n"
            "    pos = (len(norms) - 1) * percentile / 100\n"
            "    low = int(pos)\n"
            "    high = min(low + 1, len(norms) - 1)\n"
            "    return norms[low] + (norms[high] - norms[low]) * (pos - low)\n",
    },
    ("honest", "clinic1_not_learning"): {
        "missing_zero_grad":
            'diagnosis["missing_zero_grad"] = "MISSING_ZERO_GRAD"\n\n'
            + _broken("missing_zero_grad",
                      ("            for x, y in loader:\n",
                       "            for x, y in loader:\n"
                       "                model.zero_grad()   # the model's, not the optimizer's\n"),
                      ("    return Outcome(", "    print('trained')\n    return Outcome(")),
        "dead_relu":
            'diagnosis["dead_relu"] = "DEAD_NEURONS"\n\n'
            + _broken("dead_relu", ('"init_bias": -0.5,', '"init_bias": 0.0,   # ReLUs need it')),
    },
    # -- wrong and symptom-hiding work: loses the points ------------------------------------
    ("wrong", "ex1_exploding_gradients"): {
        "exploding_steps":
            "def exploding_steps(history, threshold):\n"
            "    return [r['step'] for r in history if total_grad_norm(r) >= threshold]\n",
    },
    ("hider", "clinic1_not_learning"): {          # a lower learning rate, the bug kept
        "dead_relu": 'diagnosis["dead_relu"] = "DEAD_NEURONS"\n\n'
                     + _broken("dead_relu", ('"lr": 3e-3,', '"lr": 3e-4,')),
    },
}

#: technique -> (student, assignment, {cell id: source}); the course root is `{ROOT}`
TAMPERING: dict[str, tuple[str, str, dict[str, str]]] = {
    "rebinding test-cell names": ("rebinder", "clinic1_not_learning", {
        "missing_zero_grad":
            'diagnosis["missing_zero_grad"] = "LR_TOO_HIGH"\n\n'
            "class _Healthy:\n"
            "    healthy, codes, target_reached = True, [], True\n\n"
            "class _Case:\n"
            "    expected = ('LR_TOO_HIGH', 'DEAD_NEURONS', 'MISSING_ZERO_GRAD')\n"
            "    def evaluate(self, fn, seed=0):\n"
            "        return _Healthy()\n\n"
            "class _Right:\n"
            "    right, kind, message = True, 'cause', 'right'\n\n"
            "CATALOGUE = {'missing_zero_grad': _Case(), 'dead_relu': _Case()}\n"
            "harness_changes = lambda name, fn: []\n"
            "setup_changes = lambda name, fn: []\n"
            "evaluate_repair = lambda label, fn, seed=0: _Healthy()\n"
            "class _Passed:\n"
            "    passed, message = True, 'passes'\n\n"
            "judge_repair = lambda label, fn, seed=0: _Passed()\n"
            "judge_diagnosis = lambda label, code: _Right()\n\n"
            "def repaired_missing_zero_grad(seed):\n"
            "    return None\n",
        "dead_relu": 'diagnosis["dead_relu"] = "LR_TOO_HIGH"\n\n'
                     "def repaired_dead_relu(seed):\n    return None\n",
    }),
    "patching lesson/broken_models classes and functions": ("patcher", "clinic1_not_learning", {
        "missing_zero_grad":
            "import broken_models.case\n"
            'diagnosis["missing_zero_grad"] = "MISSING_ZERO_GRAD"\n'
            "broken_models.case.Run.healthy = property(lambda self: True)\n\n" + _BROKEN_MZG,
        "dead_relu":
            "from broken_models.case import Case\n"
            'diagnosis["dead_relu"] = "DEAD_NEURONS"\n'
            "Case.evaluate = lambda self, fn, seed=0: self.run_fixed(seed)\n\n"
            + _BROKEN_DEAD_RELU,
    }),
    "patching math/numpy comparison helpers": ("comparer", "ex1_exploding_gradients", {
        "total_grad_norm":
            "math.isclose = lambda *args, **kwargs: True\n\n"
            "def total_grad_norm(record):\n    return 0.0\n",
        "suggest_clip_value":
            "np.percentile = lambda values, q: 0.0\n\n"
            "def suggest_clip_value(history, percentile=10.0):\n    return 0.0\n",
    }),
    "rigged comparison objects": ("rigger", "ex1_exploding_gradients", {
        "exploding_steps":
            "class _Yes(list):\n"
            "    def __eq__(self, other):\n        return True\n"
            "    def __ne__(self, other):\n        return False\n"
            "    def __bool__(self):\n        return True\n\n"
            "def exploding_steps(history, threshold):\n    return _Yes()\n",
    }),
    "sys.exit/os._exit in an answer": ("exiter", "ex1_exploding_gradients", {
        "suggest_clip_value":
            "import os\n\n"
            "def suggest_clip_value(history, percentile=10.0):\n"
            "    norms = [n for n in map(total_grad_norm, history) if math.isfinite(n)]\n"
            "    if not norms:\n"
            "        os._exit(0)\n"
            "    return float(np.percentile(norms, percentile))\n",
        "exploding_steps":
            "import sys\n\n"
            "def exploding_steps(history, threshold):\n"
            "    sys.exit(0)\n",
    }),
    "reading hidden tests or solutions from disk": ("reader", "ex5_gradient_check", {
        "locate_bad_parameter":
            "import json\n\n"
            "def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
            "    solution = json.load(open('{ROOT}/solutions/ex5_gradient_check/gradient_check.ipynb'))\n"
            "    assert solution['cells']\n"
            "    loss_fn.forward(model.forward(x), y)\n"
            "    model.zero_grad()\n"
            "    model.backward(loss_fn.backward())\n"
            "    worst, worst_error = None, tol\n"
            "    for name, p in model.named_parameters():\n"
            "        analytical = p.grad.copy()\n"
            "        numerical = numerical_gradient(lambda: loss_fn.forward(model.forward(x), y), p.data)\n"
            "        error = np.linalg.norm(numerical - analytical) / max(\n"
            "            np.linalg.norm(numerical) + np.linalg.norm(analytical), 1e-12)\n"
            "        if error > worst_error:\n"
            "            worst, worst_error = name, error\n"
            "    return worst\n",
    }),
    "writing to the gradebook": ("writer", "ex5_gradient_check", {
        "numerical_gradient":
            "def numerical_gradient(loss_at, array, eps=1e-5):\n"
            "    with open('{ROOT}/gradebook.db', 'ab') as gradebook:\n"
            "        gradebook.write(b'')\n"
            "    grad = np.zeros_like(array)\n"
            "    for i in np.ndindex(array.shape):\n"
            "        saved = array[i]\n"
            "        array[i] = saved + eps\n"
            "        plus = loss_at()\n"
            "        array[i] = saved - eps\n"
            "        minus = loss_at()\n"
            "        array[i] = saved\n"
            "        grad[i] = (plus - minus) / (2 * eps)\n"
            "    return grad\n",
    }),
    "a thread or child process left running": ("spawner", "ex1_exploding_gradients", {
        "exploding_steps":
            "import threading\nimport time\n\n"
            "def _later():\n"
            "    time.sleep(0.2)\n"
            "    math.isclose = lambda *args, **kwargs: True\n\n"
            "threading.Thread(target=_later, daemon=True).start()\n\n"
            "def exploding_steps(history, threshold):\n    return []\n",
        "suggest_clip_value":
            "import subprocess\n\n"
            "subprocess.Popen(['sleep', '600'])\n\n"
            "def suggest_clip_value(history, percentile=10.0):\n    return 0.0\n",
    }),
    "globals(), sys.modules and builtins": ("reacher", "ex5_gradient_check", {
        "numerical_gradient":
            "import builtins\n"
            "import sys\n\n"
            "def numerical_gradient(loss_at, array, eps=1e-5):\n"
            "    sys.modules['numpy'].allclose = lambda *a, **k: True\n"
            "    globals()['np'].array_equal = lambda *a, **k: True\n"
            "    builtins.print('patched')\n"
            "    return array * 0\n",
    }),
}


def _solution_cell(assignment: str, cell: str) -> str:
    """An answer cell of the instructor's solution (the simulated class edits them)."""
    from lesson.course.learner.catalog import load_exercises

    exercise = next(e for e in load_exercises() if e.name == assignment)
    nb = json.loads(exercise.solution(Path(__file__).resolve().parents[3]).read_text())
    return next("".join(c["source"]) for c in nb["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == cell)


#: What an honest class gets wrong without tampering: (student, assignment) -> (the notebook
#: edited, "solution" or "release"; {answer cell id: new source}). A kernel (nbgrader's own
#: Execute) and the clean room must grade each one the same, cell by cell.
FAULTS: dict[tuple[str, str], tuple[str, dict[str, str]]] = {
    ("blank", "ex5_gradient_check"): ("release", {}),           # handed in untouched
    ("partial", "ex5_gradient_check"): ("release", {             # the first part done
        "numerical_gradient": _solution_cell("ex5_gradient_check", "numerical_gradient")}),
    ("syntax", "ex5_gradient_check"): ("solution", {             # a missing colon
        "locate_bad_parameter": _solution_cell("ex5_gradient_check", "locate_bad_parameter")
        .replace("in model.named_parameters():", "in model.named_parameters()")}),
    ("indent", "ex1_exploding_gradients"): ("solution", {        # a body out of line
        "exploding_steps": "def exploding_steps(history, threshold):\n"
                           "    steps = [r['step'] for r in history\n"
                           "             if total_grad_norm(r) > threshold]\n"
                           "      return steps\n"}),
    ("raiser", "ex5_gradient_check"): ("solution", {             # raises from its line 5
        "locate_bad_parameter": "def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
                                "    if tol <= 0:\n"
                                "        raise ValueError('tol must be positive')\n"
                                "    named = dict(model.named_parameters())\n"
                                "    raise KeyError(f'not done yet: {sorted(named)[0]}')\n"}),
    ("toploop", "ex5_gradient_check"): ("solution", {            # right, then never ends
        "numerical_gradient": _solution_cell("ex5_gradient_check", "numerical_gradient")
        + "\n\nimport time\n\nwhile True:          # 'keep the kernel busy'\n"
          "    time.sleep(0.1)\n"}),
    ("looper", "ex1_exploding_gradients"): ("solution", {        # loops for an empty history
        "suggest_clip_value":
            "import time\n\n"
            "def suggest_clip_value(history, percentile=10.0):\n"
            "    while not history:          # 'wait until there are records': never returns\n"
            "        time.sleep(0.05)\n"
            "    norms = [n for n in map(total_grad_norm, history) if math.isfinite(n)]\n"
            "    if not norms:\n"
            "        raise ValueError('no finite norm')\n"
            "    return float(np.percentile(norms, percentile))\n"}),
    ("editor", "ex1_exploding_gradients"): ("solution", {        # a test made to pass
        "test_exploding_steps": "print('all tests pass')\n",
        "exploding_steps": "def exploding_steps(history, threshold):\n    return []\n"}),
}
#: a submission that is not a notebook at all: it cannot be graded, in either path
GARBLED = ("garbled", "ex5_gradient_check", "{this is not json")
#: nbgrader's own Execute (the student's kernel) in place of the clean room, for comparing
KERNEL_EXECUTE = """
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata"]
"""


#: the two clinic cases the class answers, under their clinic labels (case1_8, case1_3)
MISSING_ZERO_GRAD = find_clinic_case("missing_zero_grad").ident
DEAD_RELU = find_clinic_case("dead_relu").ident


def _labelled(cells: dict[str, str]) -> dict[str, str]:
    """The answers above are written with the cases' names; the clinic asks by label."""
    def relabel(text: str) -> str:
        return text.replace("missing_zero_grad", MISSING_ZERO_GRAD).replace("dead_relu", DEAD_RELU)
    return {relabel(k): relabel(v) for k, v in cells.items()}


EDITS = {key: _labelled(cells) if key[1] == "clinic1_not_learning" else cells
         for key, cells in EDITS.items()}
TAMPERING = {name: (who, a, _labelled(cells) if a == "clinic1_not_learning" else cells)
             for name, (who, a, cells) in TAMPERING.items()}


def _edit(path: Path, replacements: dict[str, str], target: Path, root: Path) -> Path:
    nb = json.loads(path.read_text(encoding="utf-8"))
    seen = set()
    for cell in nb["cells"]:
        cid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cid in replacements:
            cell["source"] = replacements[cid].replace("{ROOT}", str(root))
            seen.add(cid)
    missing = set(replacements) - seen
    if missing:
        raise ValueError(f"{path}: no answer cells {sorted(missing)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return target


def submissions(solutions: Path, root: Path, drafts: Path, models: list[str] = ("model",),
                faults: bool = False) -> dict[tuple[str, str], Path]:
    """(student, assignment) -> notebook for the whole class: the model students hand in the
    solutions, the others their edits of them; in a clinic, all but the honest students edit the
    release instead (only the cases they answer are filled in: the others score nothing and
    cost no training). `faults` adds FAULTS and GARBLED.
    `root` is the course folder being graded."""
    out: dict[tuple[str, str], Path] = {}
    for assignment, notebook in ASSIGNMENTS.items():
        source = solutions / assignment / f"{notebook}.ipynb"
        for student in models:
            out[(student, assignment)] = source
    edits = dict(EDITS)
    edits.update({(s, a): cells for s, a, cells in TAMPERING.values()})
    release = solutions.parent / "exercises"
    for (student, assignment), cells in edits.items():
        notebook = ASSIGNMENTS[assignment]
        base = release if assignment.startswith("clinic") and student != "honest" else solutions
        out[(student, assignment)] = _edit(base / assignment / f"{notebook}.ipynb", cells,
                                           drafts / student / assignment / f"{notebook}.ipynb",
                                           root)
    if faults:
        for (student, assignment), (base, cells) in FAULTS.items():
            notebook = ASSIGNMENTS[assignment]
            folder = release if base == "release" else solutions
            out[(student, assignment)] = _edit(
                folder / assignment / f"{notebook}.ipynb", cells,
                drafts / student / assignment / f"{notebook}.ipynb", root)
        student, assignment, text = GARBLED
        target = drafts / student / assignment / f"{ASSIGNMENTS[assignment]}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        out[(student, assignment)] = target
    return out


def honest(student: str) -> bool:
    """Whether a simulated student's work is honest (tampering students are not): a kernel
    and the clean room must grade it the same."""
    return student not in {who for who, _, _ in TAMPERING.values()} and student != GARBLED[0]


#: one hundred students' worth of a class that hands in ex1 or ex5: mostly right, some
#: honest alternatives and wrong answers, the faults above, each tampering technique of these
#: two assignments once, and a notebook that is not one. (who, assignment, copies)
MIX: list[tuple[str, str, int]] = [
    ("model", "ex5_gradient_check", 28), ("model", "ex1_exploding_gradients", 27),
    ("honest", "ex1_exploding_gradients", 8), ("wrong", "ex1_exploding_gradients", 8),
    ("partial", "ex5_gradient_check", 5), ("blank", "ex5_gradient_check", 4),
    ("syntax", "ex5_gradient_check", 3), ("indent", "ex1_exploding_gradients", 3),
    ("raiser", "ex5_gradient_check", 3), ("editor", "ex1_exploding_gradients", 1),
    ("toploop", "ex5_gradient_check", 1), ("looper", "ex1_exploding_gradients", 1),
    ("garbled", "ex5_gradient_check", 1),
] + [(who, a, 1) for who, a, _ in TAMPERING.values() if a != "clinic1_not_learning"]


def class_of(n: int, solutions: Path, root: Path, drafts: Path) -> dict[tuple[str, str], Path]:
    """A class of `n` students (`s001`, ...), each handing in one notebook of MIX, in MIX's
    proportions; (student, assignment) -> notebook."""
    kinds = submissions(solutions, root, drafts, faults=True)
    cycle = [(who, assignment) for who, assignment, copies in MIX for _ in range(copies)]
    assert len(cycle) == 100, len(cycle)
    # spread each kind over the class rather than in runs of one kind
    order = sorted(range(100), key=lambda i: (i * 37) % 100)
    width = len(str(n))
    return {(f"s{i + 1:0{width}d}", cycle[order[i % 100]][1]): kinds[cycle[order[i % 100]]]
            for i in range(n)}
