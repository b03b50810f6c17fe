"""The sandbox's runtime guard (child.py), refusal by refusal, in a light `python -I` child.

Each refusal is the only thing between a student's code and something of the grader's: the
solutions and the gradebook (reads under a denied folder), other submissions (writes and
listings outside its folder), the grader's process (its channel, signals, /proc), and the
course's classes the tests compare with. Beside each refusal, the honest use next to it passes.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox_guard import run_guarded
from lesson.course.grading.sandbox import _code_roots

REFUSED = "refused: "


@pytest.fixture
def course(tmp_path):
    """A course folder outside the sandbox: its solutions, and a workdir of the sandbox's own."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "answer.txt").write_text("42")
    (tmp_path / "gradebook.db").write_text("grades")
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("mine")
    return tmp_path


def test_reads_inside_its_folder_and_the_libraries_outside_nothing_else(course):
    venv_file = next(p for p in (Path(sys.prefix) / "pyvenv.cfg", Path(sys.prefix) / "bin" / "python3")
                     if p.exists())
    out = run_guarded(deny=[str(course)], workdir=str(course / "work"), reads=[
        str(course / "work" / "mine.txt"), str(course / "solutions" / "answer.txt"),
        str(course / "gradebook.db"), str(venv_file), "/dev/null", "/proc/self/status",
        "/proc/1/status", os.path.join(_code_roots()[0], "lesson", "findings.py")])
    assert out[str(course / "work" / "mine.txt")] == "mine"
    assert out[str(course / "solutions" / "answer.txt")].startswith(REFUSED)
    assert out[str(course / "gradebook.db")].startswith(REFUSED)
    assert not out[str(venv_file)].startswith(REFUSED)
    assert out["/dev/null"] == "" and "Name:" in out["/proc/self/status"]
    assert out["/proc/1/status"].startswith(REFUSED)       # another process: the grader's
    assert "def layer_of" in out[os.path.join(_code_roots()[0], "lesson", "findings.py")]
    assert len(out["violations"]) == 3


def test_outside_every_allowed_root_nothing_is_readable(course):
    out = run_guarded(workdir=str(course / "work"), reads=[str(course / "gradebook.db")])
    assert out[str(course / "gradebook.db")].startswith(REFUSED)


def test_a_venv_inside_a_denied_course_stays_readable_the_rest_does_not():
    """The more specific folder wins: deny the folder that holds sys.prefix."""
    parent = os.path.dirname(os.path.realpath(sys.prefix))
    inside = os.path.join(os.path.realpath(sys.prefix), "pyvenv.cfg")
    if not os.path.exists(inside):
        pytest.skip("no pyvenv.cfg: not running in a virtual environment")
    beside = tempfile.NamedTemporaryFile(dir=parent, prefix=".nndebug-guard-", delete=False)
    beside.write(b"secret")
    beside.close()
    try:
        out = run_guarded(deny=[parent], reads=[inside, beside.name])
        assert not out[inside].startswith(REFUSED)
        assert out[beside.name].startswith(REFUSED)
    finally:
        os.unlink(beside.name)


def test_writes_only_inside_its_folder(course):
    work = course / "work"
    out = run_guarded(workdir=str(work), writes=[str(work / "out.txt"), str(course / "x.txt")],
                      code={
                          "append": f"open({str(course / 'gradebook.db')!r}, 'a')",
                          "os.open": f"import os\nos.open({str(course / 'y')!r}, os.O_WRONLY | os.O_CREAT)",
                          "null": "open('/dev/null', 'w').write('x')",
                          "mkdir": f"import os\nos.mkdir({str(work / 'sub')!r})",
                          "chdir": f"import os\nos.chdir({str(work / 'sub')!r})",
                          "remove": f"import os\nos.remove({str(course / 'gradebook.db')!r})",
                          "rename": f"import os\nos.rename({str(course / 'gradebook.db')!r}, 'g')",
                          "rmtree": f"import shutil\nshutil.rmtree({str(course / 'solutions')!r})",
                          "chdir out": "import os\nos.chdir('/')",
                          "symlink": f"import os\nos.symlink({str(course / 'solutions')!r}, 'l')",
                      })
    assert not out["write " + str(work / "out.txt")].startswith(REFUSED)
    assert out["write " + str(course / "x.txt")].startswith(REFUSED)
    for refused in ("append", "os.open", "remove", "rename", "rmtree", "chdir out", "symlink"):
        assert out[refused].startswith(REFUSED), refused
    for fine in ("null", "mkdir", "chdir"):
        assert out[fine] == "ran", (fine, out[fine])
    assert (course / "gradebook.db").read_text() == "grades"
    assert (course / "solutions" / "answer.txt").exists() and not (course / "x.txt").exists()


def test_creating_a_file_is_a_write_even_when_opened_for_reading():
    """os.open(O_RDONLY | O_CREAT) under a readable root (the venv) would leave a file there."""
    target = os.path.join(sys.prefix, f".nndebug-guard-{os.getpid()}")
    try:
        out = run_guarded(code={"create": f"import os\nos.open({target!r}, os.O_RDONLY | os.O_CREAT)"})
        assert out["create"].startswith(REFUSED + "wrote")
        assert not os.path.exists(target)
    finally:
        if os.path.exists(target):
            os.unlink(target)


def test_listing_only_its_folder_and_the_import_path(course):
    root = _code_roots()[0]
    out = run_guarded(deny=[str(course)], workdir=str(course / "work"),
                      lists=[str(course / "work"), str(course / "solutions"), root,
                             os.path.join(root, "tests")],
                      code={"here": "import os\nresult = sorted(os.listdir())"})
    assert out["list " + str(course / "work")] == ["mine.txt"]
    assert out["here"] == ["mine.txt"]                      # os.listdir() lists the cwd
    assert out["list " + str(course / "solutions")].startswith(REFUSED)
    assert "lesson" in out["list " + root]
    assert out["list " + os.path.join(root, "tests")].startswith(REFUSED)


def test_no_processes_signals_sockets_tracing_or_second_hook():
    out = run_guarded(channels=["fd_in", "fd_out"], code={
        "subprocess": "import subprocess\nsubprocess.run(['true'])",
        "system": "import os\nos.system('true')",
        "kill": "import os\nos.kill(os.getpid(), 0)",
        "socket": "import socket\nsocket.socket()",
        "settrace": "import sys\nsys.settrace(None)",
        "hook": "import sys\nseen = []\nsys.addaudithook(lambda e, a: seen.append(e))\n"
                "open('/dev/null').close()\nresult = len(seen)",
        "fork": "import os\nos.fork()",
    })
    assert out["fd_in"].startswith(REFUSED + "opened the grader's own channel")
    assert out["fd_out"].startswith(REFUSED + "opened the grader's own channel")
    for key in ("subprocess", "system", "kill", "socket", "settrace", "fork"):
        assert out[key].startswith(REFUSED), (key, out[key])
    # Python swallows a hook's refusal of sys.addaudithook: the new hook is just not added
    assert out["hook"] == 0 and "added an audit hook" in out["violations"]
    assert any("subprocess.Popen" in v for v in out["violations"])


def test_the_course_classes_cannot_be_renamed_but_its_own_can():
    """What Python's audit hook sees of a class (its name, module, bases: a disguise); a
    class's members are the snapshot's (below)."""
    out = run_guarded(code={
        "patch": "from lesson.findings import Finding\nFinding.__qualname__ = 'Other'",
        "own": "class Mine:\n    pass\nMine.__qualname__ = 'Yours'\nresult = Mine.__qualname__",
    })
    assert out["patch"] == REFUSED + "patched lesson.findings.Finding.__qualname__"
    assert out["own"] == "Yours"


def test_the_snapshot_sees_a_patched_module_attribute_or_comparison_helper():
    out = run_guarded(code={
        "module": "import lesson.findings as f\nbefore = child._snapshot()\nf.CODES = {}\n"
                  "result = child._patched(before)",
        "helper": "import math\nbefore = child._snapshot()\nmath.isclose = lambda *a, **k: True\n"
                  "math.tau = 6\nresult = child._patched(before)",
        "method": "from lesson.findings import Finding\nbefore = child._snapshot()\n"
                  "Finding.__eq__ = lambda a, b: True\nresult = child._patched(before)",
        "nothing": "import lesson.findings as f\nbefore = child._snapshot()\nx = f.CODES\n"
                   "result = child._patched(before)",
    })
    assert out["module"] == ["patched lesson.findings.CODES"]
    assert out["helper"] == ["patched math.isclose"]       # tau is not a comparison helper
    assert out["method"] == ["patched lesson.findings.Finding.__eq__"]
    assert out["nothing"] == []


# -- what the child hands back (its request handlers, run here without the guard) --------------
@pytest.fixture
def namespace():
    from lesson.course.grading import child

    saved = dict(child.NAMESPACE)
    yield child
    child.NAMESPACE.clear()
    child.NAMESPACE.update(saved)


def test_a_cell_reports_its_output_error_and_the_names_it_offers(namespace):
    from lesson.course.grading import wire

    child = namespace
    reply = child._cell("import math\nx = [1, 2]\ndef f(a):\n    return a * 2\nprint('hi')\n",
                        "c1", ["x", "f", "math", "missing"])
    assert reply["ok"] and reply["error"] is None and reply["stdout"] == "hi\n"
    assert reply["names"]["x"] == {"kind": "data", "value": [1, 2]}
    assert reply["names"]["f"] == {"kind": "callable", "type": "function"}
    assert reply["names"]["math"] == {"kind": "module", "module": "math"}
    assert "missing" not in reply["names"]
    reply = child._cell("o = object()\nimport sys\nprint('e', file=sys.stderr)\n1 / 0\n", "c2",
                        ["o"])
    assert not reply["ok"] and reply["stderr"] == "e\n"
    assert reply["error"]["type"] == "ZeroDivisionError"
    assert "ArithmeticError" in reply["error"]["bases"]
    assert '<cell c2>", line 4' in reply["error"]["traceback"]
    assert reply["names"]["o"]["kind"] == "unreadable"
    assert not child._cell("raise SystemExit(3)", "c3", [])["ok"]    # the child stays
    assert wire.decode(child._call("f", (21,), {})["result"]) == 42


def test_a_call_reports_its_result_and_what_it_changed_in_place(namespace):
    import numpy as np
    import torch

    child = namespace
    child._cell("def grow(xs, arr, t, model, d):\n    xs.append(3)\n    arr += 1\n    t.mul_(2)\n"
                "    model.weight.data.fill_(0.5)\n    d['k'] = 1\n    return object()\n"
                "def ok(x):\n    return x + 1\n", "defs", [])
    model = torch.nn.Linear(1, 1)
    reply = child._call("grow", ([1, 2], np.zeros(2), torch.ones(2), model),
                        {"d": {}})
    assert not reply["ok"] and reply["error"]["type"] == "TypeError"
    assert "grow returned" in reply["error"]["message"]
    assert reply["args"][0] == {"list": [1, 2, 3]}
    assert reply["args"][1]["ndarray"]["data"].tolist() == [1.0, 1.0]
    assert reply["args"][2]["tensor"].tolist() == [2.0, 2.0]
    assert reply["args"][3]["module"]["weight"].tolist() == [[0.5]]
    assert reply["kwargs"]["d"] == {"dict": {"__nndebug_wire__": "dict", "items": [["k", 1]]}}
    assert child._state(object()) is None and child._state(1) is None
    reply = child._call("ok", (1,), {})
    assert reply["ok"] and reply["result"] == 2 and reply["args"] == [None]
    missing = child._call("nothing", (), {})
    assert not missing["ok"] and missing["error"]["type"] == "NameError"
    assert child.answer_ref("ok")(2) == 3


def test_long_output_is_cut_to_its_last_twenty_thousand_characters(namespace):
    reply = namespace._cell("import sys\nprint('a' * 30000 + 'END')\n"
                            "print('b' * 30000 + 'ERR', file=sys.stderr)", "long", [])
    assert len(reply["stdout"]) == 20000 and reply["stdout"].endswith("END\n")
    assert len(reply["stderr"]) == 20000 and reply["stderr"].endswith("ERR\n")


@pytest.mark.slow
def test_the_sandbox_computes_on_one_thread_and_keeps_reporting_a_patch():
    """Many sandboxes share a grading machine: each one's torch uses a single thread. A patch
    stays reported on every later request while it stands."""
    from lesson.course.grading.sandbox import Limits, Sandbox

    box = Sandbox(Limits(timeout_s=60, memory_mb=2048))
    try:
        reply = box.request(("cell", "import torch\nn = torch.get_num_threads()", "threads", ["n"]))
        assert reply["names"]["n"] == {"kind": "data", "value": 1}
        reply = box.request(("cell", "import lesson.findings as f\nf.CODES = {}", "patch", []))
        assert reply["tampering"] == ["patched lesson.findings.CODES"]
        reply = box.request(("cell", "x = 1", "later", ["x"]))      # still patched: still said
        assert reply["tampering"] == ["patched lesson.findings.CODES"]
    finally:
        box.close()



# -- the guard's edges: each test below failed on a small bug `make mutate` planted in child.py --
def test_a_course_class_only_its_submodule_holds_is_guarded_and_a_stdlib_class_is_not():
    """The guard knows the course's and the libraries' classes by their module's top-level
    package, submodules included; other libraries' classes are the student's to set up."""
    out = run_guarded(preload=["lesson.debugger.rules"], code={
        "deep": "from lesson.debugger.rules import Thresholds\nThresholds.__qualname__ = 'X'",
        "stdlib": "import json\njson.JSONDecodeError.__qualname__ = 'Renamed'\n"
                  "result = json.JSONDecodeError.__qualname__",
    })
    assert out["deep"] == REFUSED + "patched lesson.debugger.rules.Thresholds.__qualname__"
    assert out["stdlib"] == "Renamed"


def test_opening_a_readable_file_to_write_or_truncate_is_a_write():
    """os.open without O_CREAT: write-only, or read-only with O_TRUNC (Linux truncates)."""
    target = os.path.join(sys.prefix, f".nndebug-guard-{os.getpid()}")
    with open(target, "w") as f:
        f.write("kept")
    try:
        out = run_guarded(code={
            "wronly": f"import os\nos.open({target!r}, os.O_WRONLY)",
            "trunc": f"import os\nos.open({target!r}, os.O_RDONLY | os.O_TRUNC)",
            "read": f"result = open({target!r}).read()",
        })
        assert out["wronly"].startswith(REFUSED + "wrote")
        assert out["trunc"].startswith(REFUSED + "wrote")
        assert out["read"] == "kept"
        with open(target) as f:
            assert f.read() == "kept"
    finally:
        os.unlink(target)


def test_a_denied_folder_that_is_also_a_readable_root_is_denied():
    """A tie between a readable root and a denied folder goes to the deny list."""
    prefix = os.path.realpath(sys.prefix)
    inside = next(p for p in (os.path.join(prefix, "pyvenv.cfg"), os.path.join(prefix, "bin",
                                                                               "python3"))
                  if os.path.exists(p))
    out = run_guarded(deny=[prefix], reads=[inside])
    assert out[inside].startswith(REFUSED)


def test_the_snapshot_reads_past_a_missing_module_and_holds_public_values_only(monkeypatch):
    """sys.modules holds None for imports that failed; the snapshot goes on past them. It
    takes a module's public attributes, not its private ones (a library's caches change
    under honest use) nor the submodules an import adds."""
    import lesson.findings  # noqa: F401
    from lesson.course.grading import child

    monkeypatch.setattr(sys, "modules", {"a_failed_import": None, **sys.modules})
    snapshot = child._snapshot()
    assert ("lesson.findings", "CODES") in snapshot
    modules = set(sys.modules)
    top = [(owner, attr) for owner, attr in snapshot if owner in modules]
    assert top and not any(attr.startswith("_") for _, attr in top)
    assert not any(isinstance(getattr(sys.modules[o], a), type(sys)) for o, a in top)


def test_an_error_keeps_the_start_of_its_message_and_the_end_of_its_traceback():
    from lesson.course.grading import child

    error = child._error(ValueError("m" * 5000))
    assert error["message"] == "m" * 4000
    error = child._error(ValueError("t" * 9000))
    assert len(error["traceback"]) == 8000 and error["traceback"].endswith("t\n")


def test_a_cell_compiles_as_a_kernel_would(namespace):
    """A cell's own `from __future__` import counts; the grader's module's does not leak in
    (child.py has `from __future__ import annotations`); inspect reads a cell's functions."""
    child = namespace
    future = child._cell("from __future__ import annotations\ndef f(x: Undefined) -> None:\n"
                         "    pass\n", "future", [])
    assert future["ok"], future["error"]
    plain = child._cell("def g(x: Undefined):\n    pass\n", "plain", [])
    assert not plain["ok"] and plain["error"]["type"] == "NameError"
    source = child._cell("import inspect\ndef h():\n    return 1\nsrc = inspect.getsource(h)\n",
                         "inspect", ["src"])
    assert source["names"]["src"] == {"kind": "data", "value": "def h():\n    return 1\n"}


def test_an_argument_whose_state_cannot_be_read_is_left_out():
    """A tensor without data (torch raises NotImplementedError, a RuntimeError) is no state."""
    import torch

    from lesson.course.grading import child

    assert child._state(torch.empty(2, device="meta")) is None
