"""The clean room's static check, construct by construct: each refusal alone, and the honest
code beside it that must pass (lesson.course.grading.answers)."""
from __future__ import annotations

import pytest

import ast

from lesson.course.grading.answers import (answers, bound_names, imported_names, tampering,
                                           top_level_names)

REFUSED = {
    # imports that reach the interpreter, processes or the grader
    "import a forbidden module": "import pickle\n",
    "import a forbidden submodule": "import importlib.util\n",
    "import from a forbidden package": "from concurrent import futures\n",
    "import the grader": "from lesson.course.grading import wire\n",
    "import the grader's module": "import lesson.course.grading.sandbox\n",
    "import a name of the grader": "from lesson.course import grading\n",
    "sys under another name": "import sys as system\n",
    "star import": "from math import *\n",
    "from os import a process call": "from os import system\n",
    "from posix import a process call": "from posix import kill\n",
    "from sys import modules": "from sys import modules\n",
    # names
    "vars": "import math\nvars(math)['isclose'] = None\n",
    "globals": "g = globals\n",
    "locals in a function": "def f():\n    return locals()\n",
    "compile": "code = compile('1', 'x', 'eval')\n",
    "__import__": "m = __import__('os')\n",
    "breakpoint": "breakpoint()\n",
    "memoryview": "m = memoryview(b'x')\n",
    "BaseException": "def f():\n    try:\n        pass\n    except BaseException:\n        pass\n",
    "KeyboardInterrupt": "raise KeyboardInterrupt\n",
    "sys itself": "import sys\nprint(sys)\n",
    "sys.modules": "import sys\nsys.modules.clear()\n",
    "builtins through an attribute": "import math\nmath.builtins.len = None\n",
    "writing sys.stderr": "import sys\nsys.stderr = None\n",
    "deleting sys.stdout": "import sys\ndel sys.stdout\n",
    # attributes
    "a private dunder": "def f(x):\n    return x.__dict__\n",
    "__globals__": "def f(g):\n    return g.__globals__\n",
    "frames": "def f(e):\n    return e.__traceback__.tb_frame\n",
    "f_back": "def f(fr):\n    return fr.f_back\n",
    "_getframe": "import math\nfr = math._getframe(0)\n",
    "os.kill": "import os\nos.kill(1, 9)\n",
    "os.environ": "import os\nkey = os.environ['HOME']\n",
    "os.path is fine, os.system is not": "import os\np = os.path.join('a')\nos.system('ls')\n",
    # modules handed on by other modules, past the checks on their names
    "sys from os": "from os import sys as s\ns.modules.clear()\n",
    "sys through os": "import os\nos.sys.modules.clear()\n",
    "os through torch": "import torch\ntorch.os.system('ls')\n",
    "sys through numpy, aliased": "import numpy as np\nnp.sys.exit()\n",
    "os from torch": "from torch import os\n",
    "builtins through a module": "import math\nlen_ = math.builtins.len\n",
    "getattr a handed-on module": "import torch\nm = getattr(torch, 'os')\n",
    # writes
    "patch a module attribute": "import math\nmath.pi = 3\n",
    "patch through an alias": "import numpy as np\nlinalg = np.linalg\nlinalg.norm = None\n",
    "patch an instructor object": "CATALOGUE.cases = {}\n",
    "change an attribute": "import math\nmath.tau += 1\n",
    "annotated patch": "import math\nmath.e: float = 2.0\n",
    "delete an attribute": "import math\ndel math.pi\n",
    "patch in a tuple target": "import math\nmath.pi, x = 3, 4\n",
    "patch in a starred target": "import math\n*math.pi, = [3]\n",
    "patch a call's result attribute": "import torch\ntorch.nn.Module().forward.__self__.x = 1\n",
    "rebind an instructor global": "def f():\n    global CATALOGUE\n    CATALOGUE = 1\n",
    "rebind an imported global": "import math\ndef f():\n    global math\n    math = None\n",
    "getattr computed": "import os\nname = '_exit'\nf = getattr(os, name)\n",
    "getattr private": "import os\nf = getattr(os, '_exit')\n",
    "getattr a forbidden os name": "import os\nf = getattr(os, 'system')\n",
    "hasattr private": "import os\nok = hasattr(os, '_exit')\n",
    "setattr": "import math\nsetattr(math, 'pi', 3)\n",
    "vars in a decorator": "import math\n@vars(math).get\ndef f():\n    pass\n",
    "patch in a default": "import math\ndef f(x=setattr(math, 'pi', 3)):\n    pass\n",
    "patch in a class base": "import math\nclass C(math.__class__):\n    pass\n",
    "eval in a class keyword": "class C(metaclass=eval('type')):\n    pass\n",
    "patch in a class body": "import math\nclass C:\n    math.pi = 3\n",
    "sys named before its import": "def f():\n    return sys\nimport sys\n",
    "rebind a builtin": "def f():\n    global print\n    print = None\n",
    "a function's def does not leak": "def f():\n    def g():\n        pass\ng.x = 1\n",
    "a function's class does not leak": "def f():\n    class K:\n        pass\nK.x = 1\n",
    "a function's loop name does not leak": "def f(xs):\n    for item in xs:\n        pass\n"
                                             "item.x = 1\n",
    "rebound to an alias in a function": "import math\ndef f():\n    m = [1]\n    m = math\n"
                                         "    m.pi = 3\n",
}

HONEST = {
    "helpers and numpy": "import numpy as np\n\ndef f(x):\n    return float(np.percentile(x, 10))\n",
    "own objects' attributes": "class Box:\n    pass\n\nb = Box()\nb.x = 1\nBox.size = 3\n",
    "a call's result is its own": "import torch\nm = torch.nn.Linear(2, 2)\nm.weight.data.zero_()\n"
                                 "m.bias = None\n",
    "a literal is its own": "cfg = {}\ncfg['lr'] = 0.1\nitems = []\nitems.append(1)\n",
    "parameters are the function's": "def f(model, opt):\n    model.training = False\n"
                                     "    opt.param_groups[0]['lr'] = 0.1\n    return model\n",
    "lambda parameters": "f = lambda m: m.eval()\n",
    "self in a class": "class Net:\n    def __init__(self):\n        self.w = 1\n"
                       "    def grow(self):\n        self.w += 1\n",
    "loop variables": "import torch\nlayers = [torch.nn.Linear(2, 2)]\nfor layer in layers:\n"
                      "    layer.bias.data.zero_()\n",
    "with targets": "import io\nwith io.StringIO() as buf:\n    buf.name = 'x'\n",
    "comprehension targets": "import torch\nms = [torch.nn.Linear(2, 2)]\n"
                             "[setup(m) for m in ms]\n",
    "printing to stderr": "import sys\nprint('x', file=sys.stderr)\nv = sys.version_info\n",
    "allowed dunders": "class A:\n    def __init__(self):\n        pass\n"
                       "    def __repr__(self):\n        return type(self).__name__\n",
    "getattr with a plain name": "import torch\nact = getattr(torch.nn, 'ReLU')\n"
                                 "ok = hasattr(torch, 'cuda')\n",
    "os.path and reading files": "import os\ndef read(p):\n    with open(os.path.join('d', p)) as f:\n"
                                 "        return f.read()\n",
    "a global of its own": "count = 0\ndef f():\n    global count\n    count += 1\n",
    "importing the course": "from lesson import NetworkDebugger\nimport broken_models\n",
    "the diagnosis dict": 'diagnosis["case"] = "MISSING_ZERO_GRAD"\n',
    "a syntax error is not tampering": "def f(:\n",
    "from os import path": "from os import path, getcwd\nfrom os.path import join\n",
    "a package's submodule of a forbidden name": "from scipy import signal\nimport torch.nn\n",
    "an annotated object of its own": "class Box:\n    pass\nbox: Box = Box()\nbox.size = 3\n",
    "a call the check cannot read": "f = getattr(x)\n",
}


@pytest.mark.parametrize("technique", sorted(REFUSED))
def test_each_reach_into_the_grader_is_refused(technique):
    assert tampering(REFUSED[technique], {"CATALOGUE", "setup", "g", "K", "item"}), technique


@pytest.mark.parametrize("honest", sorted(HONEST))
def test_honest_code_beside_each_refusal_passes(honest):
    assert tampering(HONEST[honest], {"CATALOGUE", "diagnosis", "setup"}) == [], honest


def test_a_refusal_says_where_and_what():
    reasons = tampering("x = 1\nimport math\nmath.pi = 3\n")
    assert reasons == ["line 3: assigns math.pi, which it did not create (patching)"]
    assert tampering("import pickle\nimport pickle\n") == [
        "line 1: imports pickle, which reaches into the grader",
        "line 2: imports pickle, which reaches into the grader"]
    twice = tampering("import os\nos.system('a')\nos.system('a')\n")
    assert twice == ["line 2: uses os.system", "line 3: uses os.system"]


def test_an_alias_is_not_the_codes_own_object_but_a_rebinding_to_a_new_one_is():
    assert tampering("import math\nm = math\nm.pi = 3\n")
    assert tampering("import math\nm = math\nm = object()\nm.pi = 3\n") == []
    assert tampering("import math\nm = [1]\nm = math\nm.pi = 3\n")


def test_names_created_in_a_function_do_not_leak_to_the_cell():
    assert tampering("def f():\n    box = {}\n    return box\nbox.x = 1\n", {"box"})
    assert tampering("class C:\n    def f(self):\n        pass\nself.x = 1\n", {"self"})
    assert tampering("f = lambda obj: 1\nobj.x = 2\n", {"obj"})


def test_the_cells_top_level_names_in_order():
    source = ("import numpy as np, os.path\nfrom math import pi as PI\nx = y = 1\na, (b, *c) = 1, (2, 3)\n"
              "n: int = 3\nm += 1\nd['k'] = 1\nfor i in range(2):\n    inside = i\nelse:\n    done = 1\n"
              "with open('f') as fh, open('g') as (gh):\n    w = 1\nif x:\n    yes = 1\nelse:\n    no = 1\n"
              "while False:\n    loop = 1\ntry:\n    t = 1\nexcept Exception:\n    handled = 1\n"
              "else:\n    fine = 1\nfinally:\n    last = 1\n"
              "def f():\n    hidden = 1\nasync def g():\n    pass\nclass C:\n    attr = 1\n"
              "from math import *\nobj.attr = 1\nx = 2\n")
    assert top_level_names(ast.parse(source)) == [
        "np", "os", "PI", "x", "y", "a", "b", "c", "n", "m", "d", "i", "inside", "done", "fh",
        "gh", "w", "yes", "no", "loop", "t", "fine", "last", "handled", "f", "g", "C"]


def test_answers_imported_and_bound_names():
    cell = answers("import math\nmath.pi = 3\nx = 1\n")
    assert cell.names == ["math", "x"] and cell.refused
    assert answers("def f(:\n").names == [] and answers("def f(:\n").refused == []
    assert imported_names("import numpy as np\nfrom os import path\nimport a.b\n"
                          "def f():\n    import json\n") == {"np", "path", "a"}
    assert imported_names("import (\n") == set()
    assert bound_names("x = 1\ndef f():\n    y = 2\n") == {"x", "f"}
    assert bound_names("x = (\n") == set()


def test_builtins_named_by_the_cell_count_as_foreign():
    """`len`, `print` and other builtins are not the cell's own objects."""
    assert tampering("print.x = 1\n")
    assert tampering("len.__doc__ = 'x'\n")
