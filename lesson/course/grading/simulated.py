"""A simulated class for the grading tests and the benchmark: honest, wrong, symptom-hiding
and tampering students, each a submission made by editing a solution's answer cells.

Every tampering student is one named technique (`TAMPERING`), written the way a student who
wants the points without the work would write it; in the student's own kernel (plain
nbgrader's Execute) each of them takes points it did not earn.
"""
from __future__ import annotations

import json
from pathlib import Path

from lesson.course.learner.clinics import find_clinic_case

#: the assignments the class hands in (the fastest notebooks of the course)
ASSIGNMENTS = {"ex1_exploding_gradients": "exploding_gradients",
               "ex5_gradient_check": "gradient_check",
               "clinic1_not_learning": "not_learning"}

_BROKEN_MZG = '''def repaired_missing_zero_grad(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 10])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for epoch in range(5):
            order = torch.randperm(len(data.x_train))
            for batch in order.split(100):
                loss = criterion(model(data.x_train[batch]), data.y_train[batch])
                loss.backward()
                optimizer.step()
                debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
'''

_DEAD_RELU = '''def repaired_dead_relu(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    data = digits(seed)
    model = mlp([64, 32, 32, 10])
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.fill_(-1.0)
                layer.bias.fill_(-5.0)
    optimizer = torch.optim.Adam(model.parameters(), lr={lr})
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(100):
            optimizer.zero_grad()
            loss = criterion(model(data.x_train), data.y_train)
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.item())
    return Outcome(scores(model, data, debugger.loss_history), debugger)
'''

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
            + _BROKEN_MZG.replace("            for batch in order.split(100):\n",
                                  "            for batch in order.split(100):\n"
                                  "                model.zero_grad()   # the model's, not the optimizer's\n")
                         .replace("    return Outcome(", "    print('trained')\n    return Outcome("),
        "dead_relu":
            'diagnosis["dead_relu"] = "DEAD_NEURONS"\n\n'
            + _DEAD_RELU.format(lr="1e-2").replace(
                "                layer.weight.fill_(-1.0)\n                layer.bias.fill_(-5.0)\n",
                "                nn.init.kaiming_normal_(layer.weight, nonlinearity='relu')\n"
                "                layer.bias.zero_()\n"),
    },
    # -- wrong and symptom-hiding work: loses the points ------------------------------------
    ("wrong", "ex1_exploding_gradients"): {
        "exploding_steps":
            "def exploding_steps(history, threshold):\n"
            "    return [r['step'] for r in history if total_grad_norm(r) >= threshold]\n",
    },
    ("hider", "clinic1_not_learning"): {          # a lower learning rate, the bug kept
        "dead_relu": 'diagnosis["dead_relu"] = "DEAD_NEURONS"\n\n' + _DEAD_RELU.format(lr="1e-3"),
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
            + _DEAD_RELU.format(lr="1e-2"),
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
                ) -> dict[tuple[str, str], Path]:
    """(student, assignment) -> notebook for the whole class: the model students hand in the
    solutions, the others their edits of them; in a clinic, all but the honest students edit the
    release instead (only the cases they answer are filled in: the others score nothing and
    cost no training).
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
    return out
