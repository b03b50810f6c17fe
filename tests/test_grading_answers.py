"""The clean room's fast parts: which answer code is refused, and what crosses back."""
from __future__ import annotations

import pytest
import torch

from lesson.course.grading import wire
from lesson.course.grading.answers import answers, tampering

HONEST = [
    "import numpy as np\n\ndef f(x):\n    return float(np.percentile(x, 10))\n",
    "def f(model):\n    for layer in model:\n        layer.bias.data = layer.bias.data * 0\n"
    "    model[0].weight[0] = 1.0\n    return model\n",
    "class Box:\n    pass\n\nBox.size = 3\n\ndef g():\n    b = Box()\n    b.x = 1\n    return b.x\n",
    'diagnosis["case"] = "MISSING_ZERO_GRAD"\n',
    "def read(path):\n    with open(path) as f:\n        return f.read()\n",
    "import matplotlib.pyplot as plt\n\ndef plot(xs):\n    fig, ax = plt.subplots()\n"
    "    ax.plot(xs)\n    print('done')\n    return fig\n",
]
TAMPERING = {
    "module attribute": "import math\nmath.isclose = lambda *a, **k: True\n",
    "class attribute": "from broken_models.case import Run\nRun.healthy = True\n",
    "aliased module": "import lesson\ndef f():\n    m = lesson\n    m.validate_data = None\n",
    "setattr": "import torch\nsetattr(torch, 'equal', lambda *a: True)\n",
    "globals": "def f():\n    globals()['x'] = 1\n",
    "sys.modules": "import sys\nsys.modules['numpy'].allclose = None\n",
    "builtins": "import builtins\n",
    "importlib": "import importlib\n",
    "exec": "exec('x = 1')\n",
    "eval": "def f():\n    return eval('1')\n",
    "dunder": "def f(x):\n    return x.__class__.__subclasses__()\n",
    "os._exit": "import os\ndef f():\n    os._exit(0)\n",
    "sys.exit": "def f():\n    raise SystemExit(0)\n",
    "threads": "import threading\n",
    "processes": "import subprocess\n",
    "getattr private": "import os\nkill = getattr(os, '_exit')\n",
    "global of the tests": "def f():\n    global CATALOGUE\n    CATALOGUE = {}\n",
}


@pytest.mark.parametrize("source", HONEST)
def test_honest_answers_are_not_refused(source):
    assert tampering(source, {"diagnosis", "np"}) == []


@pytest.mark.parametrize("technique", sorted(TAMPERING))
def test_code_that_reaches_into_the_grader_is_refused(technique):
    assert tampering(TAMPERING[technique], {"CATALOGUE"}), technique


def test_an_answer_cell_offers_its_top_level_names():
    cell = answers("import numpy as np\nx = 1\ndef f():\n    y = 2\nclass C:\n    pass\n"
                   'diagnosis["a"] = "B"\n')
    assert cell.names == ["np", "x", "f", "C", "diagnosis"] and cell.refused == []


def test_rigged_objects_cross_as_their_plain_values():
    class Yes(list):
        def __eq__(self, other):
            return True

    class Str(str):
        def __eq__(self, other):
            return True

    back = wire.decode(wire.loads(wire.dumps(wire.encode(
        {"steps": Yes([1]), "name": Str("x"), "t": torch.ones(2).as_subclass(torch.Tensor)}))))
    assert type(back["steps"]) is list and back["steps"] != [2]
    assert type(back["name"]) is str and back["name"] != "y"
    assert type(back["t"]) is torch.Tensor


def test_arrays_torch_has_no_tensor_for_cross_as_arrays():
    """An honest ex3 answer read its CSV with np.genfromtxt(names=True): a record array, which
    torch.from_numpy refuses with a TypeError; it crashed the hand-back, and the cell's names
    were lost (NameError in the tests). Records and strings cross as what they were."""
    import numpy as np

    table = np.array([(1e-4, 2.3), (1e-3, 1.9)], dtype=[("lr", "<f8"), ("loss", "<f8")])
    words = np.array(["lr", "loss"])
    back = wire.decode(wire.loads(wire.dumps(wire.encode({"table": table, "words": words}))))
    assert back["table"].dtype == table.dtype and back["table"]["loss"].tolist() == [2.3, 1.9]
    assert back["words"].tolist() == ["lr", "loss"] and back["words"].dtype == words.dtype


def test_an_object_without_plain_form_does_not_cross():
    class Anything:
        def __eq__(self, other):
            return True

    with pytest.raises(wire.Unreadable):
        wire.encode(Anything())


def test_the_grader_reads_only_plain_data():
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(Exception):
        wire.loads(pickle.dumps(Evil()))
    assert wire.loads(wire.dumps([1, "a"])) == [1, "a"]


@pytest.mark.slow
def test_the_sandbox_guard_stops_what_the_static_check_cannot_see(tmp_path):
    """Cells sent straight to the sandbox (no static check): reading a denied folder,
    patching a course module, starting a process, a deadline and a dying child."""
    from lesson.course.grading.sandbox import Limits, Sandbox, SandboxDied, TimedOut

    secret = tmp_path / "solutions"
    secret.mkdir()
    (secret / "answer.txt").write_text("42")
    box = Sandbox(Limits(timeout_s=5, memory_mb=2048), deny=[str(tmp_path)])
    try:
        reply = box.request(("cell", f"text = open({str(secret / 'answer.txt')!r}).read()",
                             "read", ["text"]))
        assert not reply["ok"] and "outside its own folder" in reply["tampering"][0]
        reply = box.request(("cell", "import lesson.findings as f\nf.CODES = {}", "patch", []))
        assert reply["ok"] and reply["tampering"] == ["patched lesson.findings.CODES"]
        reply = box.request(("cell", "import subprocess\nsubprocess.run(['true'])", "spawn", []))
        assert not reply["ok"] and "subprocess.Popen" in reply["tampering"][0]
        reply = box.request(("cell", "def f(x):\n    return [x] * 2\n", "def", ["f"]), replay=True)
        assert reply["names"]["f"]["kind"] == "callable"
        with pytest.raises(TimedOut):
            box.request(("cell", "while True:\n    pass", "loop", []))
        with pytest.raises(SandboxDied):
            box.request(("cell", "import os\nos._exit(3)", "exit", []))
        reply = box.request(("call", "f", (1,), {}))          # restarted, answers replayed
        assert reply["ok"] and wire.decode(reply["result"]) == [1, 1]
    finally:
        box.close()


def test_printing_to_stderr_is_honest_but_reaching_through_sys_is_not():
    from lesson.course.grading.answers import tampering

    assert tampering("import sys\n\ndef f(r):\n    print('x', file=sys.stderr)\n    return 1\n") == []
    for source in ("import sys\n\ndef f():\n    sys.modules['lesson'] = None\n",
                   "import sys as s\ns.modules.clear()\n", "import sys\nm = sys\n",
                   "from sys import modules\n", "import sys\nsys.exit(0)\n",
                   "import sys\nsys.stderr = None\n"):
        assert tampering(source), source


@pytest.mark.slow
def test_an_import_after_the_course_folder_changed_is_not_tampering(tmp_path):
    """Python lists a folder on sys.path again once it changed (the grader writing beside the
    course's packages while a class is graded), and importlib.metadata probes each as a zip:
    honest code that imports something new then must not lose its points. Listing what lies
    below that folder stays refused."""
    import os
    import tempfile

    from lesson.course.grading.sandbox import Limits, Sandbox, _code_roots

    box = Sandbox(Limits(timeout_s=30, memory_mb=2048), deny=[str(tmp_path)])
    try:
        assert box.request(("cell", "x = 1", "start", ["x"]))["ok"]
        for root in _code_roots():          # a file comes and goes: the folder has changed
            fd, name = tempfile.mkstemp(dir=root, prefix=".grading-test-")
            os.close(fd)
            os.remove(name)
        reply = box.request(("cell", "import wave\nfrom importlib.metadata import entry_points\n"
                             "n = len(entry_points(group='console_scripts'))", "import", ["n"]))
        assert reply["ok"] and reply["tampering"] == [], reply
        below = os.path.join(_code_roots()[0], "tests")
        reply = box.request(("cell", f"import os\nnames = os.listdir({below!r})", "list", []))
        assert not reply["ok"] and "outside its own folder" in reply["tampering"][0]
    finally:
        box.close()
