"""What of a notebook is the student's answer, and which answer code reaches into the grader.

nbgrader runs the locked test cells in the student's own kernel, so an answer cell that patches
a module, rebinds a name the tests use or rigs a comparison takes the points. The clean room
(`cleanroom.py`) only lets the student's *answers* across: the names an answer cell binds at
its top level. Before that, `tampering` reads each answer cell's code (function bodies
included) and refuses the constructs that reach outside the answer: writing attributes of
modules or of objects the code did not create, `setattr`, `globals()`, `sys.modules`,
`builtins`, `importlib`, `exec`/`eval`, frames, threads, child processes, exiting, and `os` or
`sys` reached through another module (`torch.os`, `from os import sys`). The check
is static and deliberately narrow: honest answers (helpers, prints, plots, other algorithms)
never need any of it, and what it cannot see the sandbox's runtime guard still stops.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

#: Modules an answer may not import: they reach the interpreter itself, other processes,
#: the network, or code loading.
FORBIDDEN_MODULES = frozenset({
    "builtins", "importlib", "imp", "gc", "inspect", "ctypes", "threading", "_thread",
    "multiprocessing", "concurrent", "subprocess", "signal", "socket", "pty", "code", "codeop",
    "runpy", "marshal", "pickle", "dill", "cloudpickle", "atexit", "types", "shutil", "asyncio",
    "faulthandler", "traceback", "linecache", "posix", "resource", "mmap", "nbgrader", "sqlite3", "sqlalchemy", "psycopg",
    "dask", "distributed", "lesson.course.grading", "IPython", "ipykernel", "jupyter_client",
})
#: What an answer may read of `sys` (honest code prints to sys.stderr); `sys` itself may be
#: imported only as `sys` and named only through these attributes.
SYS_ALLOWED = frozenset({"stdout", "stderr", "float_info", "maxsize", "version_info",
                         "platform", "byteorder", "int_info"})
#: Built-in functions an answer may not call (or even name).
FORBIDDEN_BUILTINS = frozenset({
    "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr", "delattr",
    "breakpoint", "exit", "quit", "memoryview", "__builtins__", "__loader__", "__spec__",
    "SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException",
})
#: Attributes of `os` that end, signal or start processes.
FORBIDDEN_OS = frozenset({
    "_exit", "abort", "kill", "killpg", "system", "fork", "forkpty", "popen", "posix_spawn",
    "posix_spawnp", "setsid", "setpgid", "execv", "execve", "execl", "execle", "execlp",
    "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
    "spawnve", "spawnvp", "spawnvpe", "register_at_fork", "write", "dup", "dup2", "close",
    "closerange", "putenv", "unsetenv", "environ", "chroot", "chdir", "fchdir",
})
#: Modules that other modules hand on as attributes (`torch.os`, `numpy.sys`, `from os import
#: sys`): reached that way, they pass every check on imports and on `os.`/`sys.` names. Honest
#: code imports them by name; reached through another module, each is refused.
HANDED_ON = frozenset({"sys", "os", "posix", "nt", "builtins", "subprocess", "importlib",
                       "ctypes"})
#: Dunder attributes honest code reads; every other `__x__` attribute is refused.
ALLOWED_DUNDERS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__call__", "__len__", "__iter__",
    "__next__", "__enter__", "__exit__", "__repr__", "__str__", "__getitem__", "__contains__",
    "__version__", "__file__",
})


@dataclass
class CellAnswers:
    """What one answer cell binds at its top level, and why it is refused ([] when not)."""

    names: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def top_level_names(tree: ast.Module) -> list[str]:
    """Names a cell binds at its top level (defs, classes, imports, assignments), in order."""
    names: list[str] = []

    def add(target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                add(t)
        elif isinstance(target, ast.Starred):
            add(target.value)
        elif isinstance(target, ast.Subscript) and isinstance(_root(target), ast.Name):
            names.append(_root(target).id)      # diagnosis["case"] = ...: the dict crosses

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name != "*":
                        names.append(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    add(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                add(node.target)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                add(node.target)
                visit(node.body + node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        add(item.optional_vars)
                visit(node.body)
            elif isinstance(node, (ast.If, ast.While)):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
    visit(tree.body)
    return list(dict.fromkeys(names))


class _Scanner(ast.NodeVisitor):
    """Collects the tampering constructs of one cell (see the module's docstring)."""

    def __init__(self, foreign: set[str]):
        self.foreign = foreign          # names the cell did not create: imports, instructor names
        self.reasons: list[str] = []
        self.scopes: list[set[str]] = [set()]   # the cell, then each function: names it
        # created itself (parameters, defs, classes, results of calls and literals)

    def refuse(self, node: ast.AST, why: str) -> None:
        self.reasons.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    # imports
    def _module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if name in FORBIDDEN_MODULES or top in FORBIDDEN_MODULES or any(
                name.startswith(m + ".") for m in FORBIDDEN_MODULES):
            self.refuse(node, f"imports {name}, which reaches into the grader")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "sys" and alias.asname not in (None, "sys"):
                self.refuse(node, "imports sys under another name")
            self._module(node, alias.name)
            self.foreign.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._module(node, node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, "star import")
            if node.module in ("os", "posix") and alias.name in FORBIDDEN_OS:
                self.refuse(node, f"imports os.{alias.name}")
            if node.module == "sys" and alias.name not in SYS_ALLOWED:
                self.refuse(node, f"imports sys.{alias.name}")
            if alias.name in HANDED_ON:
                self.refuse(node, f"imports {alias.name} from {node.module} (import it by name)")
            self._module(node, f"{node.module}.{alias.name}")
            self.foreign.add(alias.asname or alias.name)

    # names and attributes
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self.refuse(node, f"uses {node.id}")
        elif node.id == "sys" and "sys" in self.foreign:   # reached only outside sys.<allowed>
            self.refuse(node, "uses sys itself (only sys.stdout, sys.stderr and the like)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        dotted = _dotted(node)
        if attr.startswith("__") and attr.endswith("__") and attr not in ALLOWED_DUNDERS:
            self.refuse(node, f"reads {attr}")
        elif attr.startswith("_getframe") or attr in {"f_globals", "f_locals", "f_back",
                                                       "gi_frame", "cr_frame", "tb_frame"}:
            self.refuse(node, f"reads frames ({attr})")
        elif dotted.startswith("os.") and attr in FORBIDDEN_OS:
            self.refuse(node, f"uses {dotted}")
        elif attr in HANDED_ON:
            self.refuse(node, f"reaches {attr} through {_dotted(node.value) or 'an object'}")
        elif (isinstance(node.value, ast.Name) and node.value.id == "sys"
              and attr in SYS_ALLOWED and not isinstance(node.ctx, (ast.Store, ast.Del))):
            return                           # sys.stderr and the like: reading them is honest
        elif dotted.startswith(("sys.", "builtins.")):
            self.refuse(node, f"uses {dotted}")
            return
        self.generic_visit(node)

    # writes
    def _created_here(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def _write(self, target: ast.AST, what: str) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._write(t, what)
            return
        if isinstance(target, ast.Starred):
            self._write(target.value, what)
            return
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        root = _root(target)
        if not isinstance(root, ast.Name):
            if isinstance(target, ast.Attribute):
                self.refuse(target, f"{what} an attribute of an object it did not create")
            return
        if isinstance(target, ast.Attribute) and not self._created_here(root.id):
            self.refuse(target, f"{what} {_dotted(target) or root.id + '...'}, which it did not "
                                f"create (patching)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._write(target, "assigns")
        self._note_locals(node.targets, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._write(node.target, "changes")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._write(node.target, "assigns")
        if node.value is not None:
            self._note_locals([node.target], node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._write(target, "deletes")
        self.generic_visit(node)

    def _note_locals(self, targets: list[ast.AST], value: ast.AST) -> None:
        """A name bound to a new object (a call, a literal, a comprehension) is the code's own:
        its attributes may be written. A name bound to another name or attribute is an alias."""
        own = not isinstance(value, (ast.Name, ast.Attribute, ast.Subscript))
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    (self.scopes[-1].add if own else self.scopes[-1].discard)(node.id)

    # scopes: parameters and locals created in a function are its own
    def _function(self, node) -> None:
        self.scopes[-1].add(node.name)
        for deco in node.decorator_list:
            self.visit(deco)
        args = node.args
        params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        for default in args.defaults + args.kw_defaults:
            if default is not None:
                self.visit(default)
        self.scopes.append(set(params))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append({a.arg for a in node.args.args})
        self.visit(node.body)
        self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scopes[-1].add(node.name)
        for base in node.bases:
            self.visit(base)
        for kw in node.keywords:
            self.visit(kw)
        self.scopes.append({"self", "cls"})
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def _own_targets(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.scopes[-1].add(node.id)

    def visit_For(self, node: ast.For) -> None:
        self._own_targets(node.target)          # loop variables are the code's own names
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._own_targets(node.optional_vars)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._own_targets(node.target)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in self.foreign:
                self.refuse(node, f"rebinds the global {name} from inside a function")

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        if name in {"getattr", "hasattr"} and len(node.args) >= 2 and not (
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and not node.args[1].value.startswith("_")
                and node.args[1].value not in FORBIDDEN_OS | HANDED_ON):
            self.refuse(node, f"{name} with a computed, private or forbidden attribute name")
        self.generic_visit(node)


def tampering(source: str, instructor_names: set[str] = frozenset()) -> list[str]:
    """Why the answer cell `source` is refused ([] when it is not); a syntax error is not
    tampering (the cell just fails, as it would in the kernel)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {a.asname or a.name.split(".")[0] for a in node.names}
    scanner = _Scanner(set(instructor_names) | imported | set(dir(builtins)))
    scanner.visit(tree)
    return list(dict.fromkeys(scanner.reasons))


def answers(source: str, instructor_names: set[str] = frozenset()) -> CellAnswers:
    """The names an answer cell offers and why it is refused."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return CellAnswers()
    return CellAnswers(names=top_level_names(tree), refused=tampering(source, instructor_names))


def imported_names(source: str) -> set[str]:
    """Names a cell binds with top-level import statements only."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {alias.asname or alias.name.split(".")[0] for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def bound_names(source: str) -> set[str]:
    """Every name an instructor cell binds at its top level (what the tests rely on)."""
    try:
        return set(top_level_names(ast.parse(source)))
    except SyntaxError:
        return set()
