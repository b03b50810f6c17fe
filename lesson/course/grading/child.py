"""Inside the sandbox: run the student's cells and functions, hand back plain data only.

Started by `sandbox.Sandbox` as `python -I -c ...`, or forked from a pristine interpreter; the
grader imports it only to name `answer_ref` in what it pickles, and runs none of it. The guards
(an audit hook and a snapshot of the course's modules) go up after the libraries are imported
and before the first student line runs.
"""
from __future__ import annotations

import io
import linecache
import os
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

#: characters of a request's stdout and stderr sent back (the last ones)
MAX_OUTPUT = 20_000
#: the student's namespace: the notebook's globals, as the kernel would have them
NAMESPACE: dict[str, Any] = {"__name__": "__main__"}
VIOLATIONS: list[str] = []
_PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec",
                   "os.spawn", "os.posix_spawn", "os.kill", "os.killpg", "signal.pthread_kill",
                   "socket.", "ctypes.", "os.chroot", "sys.setprofile", "sys.settrace",
                   "cpython.remote_debugger_script", "sys.remote_exec", "_posixsubprocess")
_FS_WRITES = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
              "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "os.chdir")
_LINKS = ("os.symlink", "os.link")
#: comparison helpers the tests' checks could lean on (torch and NumPy rebind some of their
#: other attributes lazily, so only these are watched outside the course's own modules)
_WATCHED = {
    "math": ("isclose", "isfinite", "isnan", "isinf", "sqrt", "fabs"),
    "builtins": ("abs", "all", "any", "bool", "float", "int", "isinstance", "len", "max", "min",
                 "sorted", "set", "str", "sum", "type", "round", "list", "dict", "tuple", "repr"),
    "operator": ("eq", "ne", "lt", "le", "gt", "ge"),
    "numpy": ("allclose", "isclose", "array_equal", "array_equiv", "isfinite", "percentile",
              "argmin", "argmax", "ndarray", "linalg"),
    "torch": ("equal", "allclose", "isclose", "isfinite", "all", "any", "Tensor", "tensor",
              "no_grad"),
}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _install_guard(config: dict) -> None:
    workdir = os.path.realpath(config["workdir"])
    packages = [os.path.realpath(p) for p in config["packages"]]
    deny = [os.path.realpath(p) for p in config["deny"]]
    readable = list(dict.fromkeys(
        [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
        + ["/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev"]))
    # installed packages' metadata (importlib.metadata reads entry points from it, the course's
    # own editable install included): metadata only, never the folders beside it
    metadata = [os.path.realpath(os.path.join(entry, name)) for entry in sys.path
                if os.path.isdir(entry) for name in os.listdir(entry)
                if name.endswith((".egg-info", ".dist-info"))]
    # the folders on sys.path themselves, not what is in them: the import system lists such a
    # folder again once it changed (the grader writing beside the course's packages, say), and
    # importlib.metadata probes each as a zip archive, both inside honest code's imports. A
    # listing shows names only; every file inside stays as readable as the rules below say.
    search_path = {os.path.realpath(e) for e in sys.path if e and os.path.isdir(e)}
    protocol = {config["fd_in"], config["fd_out"]}
    # the libraries' classes as they stand now (classes made later, by imports or by the
    # student, may be set up freely)
    known = {id(v) for name, m in list(sys.modules.items()) if m is not None
             and name.split(".")[0] in ("lesson", "broken_models", "torch", "numpy", "matplotlib")
             for v in list(vars(m).values()) if isinstance(v, type)}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def refuse(why: str) -> None:
        VIOLATIONS.append(why)
        raise PermissionError(f"refused by the grader's sandbox: {why}")

    own_proc = f"/proc/{os.getpid()}"

    def may_read(path: str) -> bool:
        pid = path[len("/proc/"):].split("/", 1)[0] if _inside(path, "/proc") else ""
        if pid.isdigit() and not _inside(path, own_proc):
            return False    # another process's memory, environment or files: the grader's
        if path in search_path or _inside(path, workdir) \
                or any(_inside(path, p) for p in packages + metadata):
            return True
        allowed = [len(r) for r in readable if _inside(path, r)]
        denied = [len(d) for d in deny if _inside(path, d)]
        if denied:        # the more specific folder wins: a venv inside the course folder
            return bool(allowed) and max(allowed) > max(denied)   # stays readable, the rest not
        return bool(allowed) or path == "/dev/null"

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                if path in protocol:
                    refuse("opened the grader's own channel")
                return
            if path is None:
                return
            real = os.path.realpath(os.fsdecode(path))
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writes and not (_inside(real, workdir) or real == "/dev/null"):
                refuse(f"wrote {real}, outside its own folder")
            if not may_read(real):
                refuse(f"opened {real}, outside its own folder")
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args and args[0] is not None else "."
            if not isinstance(path, int) and not may_read(os.path.realpath(os.fsdecode(path))):
                refuse(f"listed {os.fsdecode(path)}, outside its own folder")
        elif event.startswith(_PROCESS_EVENTS):
            refuse(f"{event} (no processes, signals or sockets)")
        elif event.startswith(_LINKS):
            refuse(f"{event} (no links)")
        elif event.startswith(_FS_WRITES):
            target = args[0] if args else None
            if isinstance(target, (str, bytes, os.PathLike)) and not _inside(
                    os.path.realpath(os.fsdecode(target)), workdir):
                refuse(f"{event} on {os.fsdecode(target)}, outside its own folder")
        elif event in ("object.__setattr__", "object.__delattr__"):
            obj = args[0]
            if isinstance(obj, type) and id(obj) in known:
                refuse(f"patched {obj.__module__}.{obj.__qualname__}.{args[1]}")
        elif event == "sys.addaudithook":
            refuse("added an audit hook")

    sys.addaudithook(hook)


def _snapshot() -> dict[tuple[str, str], int]:
    """id() of every public attribute of the course's modules, their classes, and the
    comparison helpers of math/numpy/torch: a patch shows up as a changed id."""
    ids: dict[tuple[str, str], int] = {}
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        course = name.split(".")[0] in ("lesson", "broken_models")
        if not (course or name in _WATCHED):
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("_") or isinstance(value, type(sys)) or (
                    not course and attr not in _WATCHED[name]):
                continue
            ids[(name, attr)] = id(value)
            if course and isinstance(value, type) and value.__module__ == name:
                for key, member in list(vars(value).items()):
                    ids[(f"{name}.{attr}", key)] = id(member)
    return ids


def _patched(before: dict[tuple[str, str], int]) -> list[str]:
    now = _snapshot()
    return [f"patched {owner}.{attr}" for (owner, attr), ident in before.items()
            if now.get((owner, attr), ident) != ident]


def _capture(fn, *args, **kwargs) -> tuple[Any, str, str, BaseException | None]:
    out, err = io.StringIO(), io.StringIO()
    result, error = None, None
    try:
        with redirect_stdout(out), redirect_stderr(err):
            result = fn(*args, **kwargs)
    except BaseException as exc:          # SystemExit too: the answer fails, the child stays
        error = exc
    return result, out.getvalue()[-MAX_OUTPUT:], err.getvalue()[-MAX_OUTPUT:], error


def _error(exc: BaseException) -> dict:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.startswith("<cell")]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return {"type": type(exc).__name__, "bases": [k.__name__ for k in type(exc).__mro__],
            "message": str(exc)[:4000], "traceback": "".join(lines)[-8000:]}


def _offer(name: str) -> dict:
    from . import wire

    value = NAMESPACE[name]
    if isinstance(value, type(sys)):
        return {"kind": "module", "module": value.__name__}
    if callable(value):
        return {"kind": "callable", "type": type(value).__name__}
    try:
        return {"kind": "data", "value": wire.encode(value)}
    except wire.Unreadable as exc:
        return {"kind": "unreadable", "why": str(exc)}


def _state(obj: Any) -> Any:
    """The new state of an argument the student's function may have changed in place."""
    import numpy as np
    import torch

    from . import wire

    try:
        if isinstance(obj, torch.nn.Module):
            return {"module": {k: v.detach().clone() for k, v in obj.state_dict().items()}}
        if isinstance(obj, torch.Tensor):
            return {"tensor": wire.encode(obj)}
        if isinstance(obj, np.ndarray):
            return {"ndarray": wire.encode(obj)}
        if isinstance(obj, (list, dict)):
            return {type(obj).__name__: wire.encode(obj)}
    except (wire.Unreadable, RuntimeError):
        return None
    return None


def _statements(source: str, filename: str, progress) -> None:
    """Run a cell one top-level statement at a time, as IPython does, telling the grader
    which one is running: if the cell never ends (a loop, a crash), what the statements
    before it defined still counts. A syntax error raises before anything runs."""
    import __future__
    import ast

    tree = ast.parse(source, filename)
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            flags |= sum(getattr(__future__, a.name).compiler_flag for a in node.names
                         if hasattr(__future__, a.name))
    codes = [compile(ast.Module([node], []), filename, "exec", flags, dont_inherit=True)
             for node in tree.body]
    for index, code in enumerate(codes):
        progress(index)
        exec(code, NAMESPACE)


def _cell(source: str, label: str, names: list[str], progress=lambda index: None) -> dict:
    filename = f"<cell {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _, out, err, error = _capture(_statements, source, filename, progress)
    return {"ok": error is None, "error": None if error is None else _error(error),
            "stdout": out, "stderr": err,
            "names": {n: _offer(n) for n in names if n in NAMESPACE}}


def _call(name: str, args: tuple, kwargs: dict) -> dict:
    from . import wire

    fn = NAMESPACE.get(name)
    if fn is None:
        return {"ok": False, "error": {"type": "NameError", "bases": ["NameError"],
                                       "message": f"name {name!r} is not defined",
                                       "traceback": ""}, "stdout": "", "stderr": ""}
    from lesson.course.learner.run_setup import record_setup

    with record_setup() as setup:       # what the call trained with (the clinics' repair check)
        result, out, err, error = _capture(fn, *args, **kwargs)
    reply = {"ok": error is None, "error": None if error is None else _error(error),
             "stdout": out, "stderr": err, "setup": wire.encode(setup.to_plain()),
             "args": [_state(a) for a in args], "kwargs": {k: _state(v) for k, v in kwargs.items()}}
    if error is None:
        try:
            reply["result"] = wire.encode(result)
        except wire.Unreadable as exc:
            reply.update(ok=False, error={"type": "TypeError", "bases": ["TypeError"],
                                          "message": f"{name} returned {exc}",
                                          "traceback": ""})
    return reply


def main(config: dict) -> None:
    import cloudpickle
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  (imported before the guard: it reads its config)
    import numpy  # noqa: F401
    import torch

    import broken_models  # noqa: F401
    import lesson  # noqa: F401
    import lesson.course.learner.run_setup  # noqa: F401  (imported before the guard goes up)

    from . import wire
    from .frames import frame, read_frame

    torch.set_num_threads(1)
    fd_in, fd_out = config["fd_in"], config["fd_out"]
    os.chdir(config["workdir"])
    _install_guard(config)
    before = _snapshot()

    def send(reply: dict) -> None:
        os.write(fd_out, frame(wire.dumps(reply)))

    send({"hello": True})
    while True:
        try:
            message = cloudpickle.loads(read_frame(fd_in))
        except Exception:         # the grader went away
            os._exit(0)
        del VIOLATIONS[:]
        if message[0] == "cell":
            reply = _cell(*message[1:], progress=lambda index: send({"progress": index}))
        elif message[0] == "call":
            reply = _call(*message[1:])
        else:
            os._exit(0)
        reply["tampering"] = list(dict.fromkeys(VIOLATIONS + _patched(before)))
        before = _snapshot() if not reply["tampering"] else before
        try:
            send(reply)
        except Exception as exc:  # a value that torch.save cannot write
            send({"ok": False, "tampering": reply["tampering"], "stdout": "", "stderr": "",
                  "error": {"type": "TypeError", "bases": ["TypeError"],
                            "message": f"the answer cannot be sent back: {exc}",
                            "traceback": ""}, "names": {}, "args": [], "kwargs": {}})


def answer_ref(name: str) -> Any:
    """Child side: a student answer, looked up in the child's namespace."""
    return NAMESPACE[name]
