"""The sandbox's runtime guard, alone, in a light child process (tests' helper).

`child._install_guard` installs an audit hook that no Python code can remove, so it cannot be
tried in the test process. Here a `python -I` child (started as the sandbox starts its own,
with the course's packages first on sys.path) installs the guard with the given deny list and
tries each operation asked of it; what each gave comes back as JSON. No torch is imported: a
run takes a fraction of a second, so the grader's refusals can be checked in the quick suite.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_SCRIPT = r"""
import json, os, sys
sys.path[:0] = CODE_ROOTS
from lesson.course.grading import child
import importlib
for name in PRELOAD:
    importlib.import_module(name)
r, w = os.pipe()
config = {"workdir": WORKDIR, "packages": PACKAGES, "deny": DENY, "fd_in": r, "fd_out": w}
child._install_guard(config)
out = {}
def attempt(key, fn):
    try:
        out[key] = fn()
    except PermissionError as exc:
        out[key] = "refused: " + str(exc).split("sandbox: ", 1)[-1]
    except OSError as exc:
        out[key] = "error: " + type(exc).__name__
for path in READS:
    attempt(path, lambda: open(path).read())
for path in WRITES:
    attempt("write " + path, lambda: open(path, "w").write("x") and "written")
for path in LISTS:
    attempt("list " + path, lambda: sorted(os.listdir(path)))
for fd, name in ((r, "fd_in"), (w, "fd_out")):
    if name in CHANNELS:
        attempt(name, lambda: open(fd, closefd=False) and "opened")
for key, code in CODE.items():
    namespace = {"child": child}
    attempt(key, lambda: exec(code, namespace) or namespace.get("result", "ran"))
out["violations"] = list(child.VIOLATIONS)
sys.stdout.write(json.dumps(out))
"""


def run_guarded(deny: list[str] = (), reads: list[str] = (), writes: list[str] = (),
                lists: list[str] = (), channels: list[str] = (), code: dict[str, str] = {},
                workdir: str | None = None, preload: list[str] = ()) -> dict:
    """Each path read, written or listed under the guard: its content, or 'refused: why';
    each snippet of `code` run (its `result`, or "ran"); "violations", what the guard noted.
    `preload`: modules imported before the guard goes up (the sandbox imports the course's
    and the libraries' modules first)."""
    from lesson.course.grading.sandbox import _code_roots, _package_dirs

    own = workdir or tempfile.mkdtemp(prefix="nndebug-guard-")
    try:
        values = {"CODE_ROOTS": _code_roots(), "WORKDIR": own, "PACKAGES": _package_dirs(),
                  "DENY": [os.path.realpath(d) for d in deny], "READS": list(reads),
                  "WRITES": list(writes), "LISTS": list(lists), "CHANNELS": list(channels),
                  "CODE": dict(code), "PRELOAD": list(preload)}
        script = "".join(f"{k} = {v!r}\n" for k, v in values.items()) + _SCRIPT
        done = subprocess.run([sys.executable, "-I", "-B", "-c", script], cwd=own,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    finally:
        if workdir is None:
            import shutil
            shutil.rmtree(own, ignore_errors=True)
