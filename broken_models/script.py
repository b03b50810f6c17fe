"""A case's training script as a student sees it: the function and everything of the page it uses.

A page's `train_broken` calls helpers (a model class, a data-loading function, a constant) that
the page defines beside it, and shared helpers from `broken_models.datasets`. To investigate, a
student must be able to read all of it; none of it may name the bug (the page's file name and
docstring do). `case_script(case)` collects, from the page's own source:

* the imports the script and its helpers need (only the names they use);
* the page's top-level definitions they use, transitively (classes, functions, constants), in
  page order, never the card or the other script;
* the script itself, renamed;
* the shared helpers they import from the catalogue's own modules, with what those use in turn,
  to print after the script (they are imported, not redefined).

`Script.text` is one module's source (imports, helpers, script) that runs as it reads: the
clinics compile it under a neutral file name, so `inspect` and `??` show this text and nothing
else.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from broken_models.case import PAGE_FIELDS, Case

#: page names that are never part of the script a student sees: the two scripts and the card
_NEVER = PAGE_FIELDS | {"train_broken", "train_fixed", "symptom_seen", "target_reached"}
#: catalogue modules that belong to the harness, not to the script: imported, never printed
_HARNESS_MODULES = ("broken_models.case", "broken_models.checks")


@dataclass(frozen=True)
class Script:
    """The pieces of a case's script, in the order they are printed."""

    imports: str                          # import statements, only of names used
    helpers: str                          # the page's own definitions the script uses
    function: str                         # the training function, renamed
    shared: tuple[tuple[str, str], ...]   # (module, source) of shared helpers it uses

    @property
    def text(self) -> str:
        """The module source: imports, helpers, function (it runs as printed)."""
        return "\n\n\n".join(p for p in (self.imports, self.helpers, self.function) if p) + "\n"

    def printed(self) -> str:
        """`text`, then the shared helpers under a comment saying where they come from."""
        out = self.text
        for module, source in self.shared:
            out += f"\n\n# ---- from {module} (the course's shared helpers) ----\n\n{source}\n"
        return out


def _names(node: ast.AST) -> set[str]:
    """Every name a piece of code reads (decorators and annotations included)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound(stmt: ast.stmt) -> list[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


class _Module:
    """One module's top-level statements, by the names they bind."""

    def __init__(self, module: ModuleType):
        self.module = module
        self.source = inspect.getsource(module)
        self.tree = ast.parse(self.source)
        self.defs: dict[str, ast.stmt] = {}
        self.imports: dict[str, tuple[ast.stmt, ast.alias]] = {}
        for stmt in self.tree.body:
            for name in _bound(stmt):
                self.defs[name] = stmt
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    self.imports[bound] = (stmt, alias)

    def segment(self, stmt: ast.stmt) -> str:
        start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        lines = self.source.splitlines()[start - 1:stmt.end_lineno]
        return "\n".join(lines)

    def closure(self, names: set[str], skip: frozenset[str] = frozenset()) \
            -> tuple[list[ast.stmt], set[str]]:
        """The top-level statements that `names` need, transitively, in source order, and the
        imported names among everything they read."""
        wanted: list[ast.stmt] = []
        imported: set[str] = set()
        todo, seen = list(names), set()
        while todo:
            name = todo.pop()
            if name in seen or name in skip:
                continue
            seen.add(name)
            if name in self.imports:
                imported.add(name)
            elif name in self.defs and self.defs[name] not in wanted:
                stmt = self.defs[name]
                wanted.append(stmt)
                todo.extend(_names(stmt))
        order = {id(s): i for i, s in enumerate(self.tree.body)}
        return sorted(wanted, key=lambda s: order[id(s)]), imported


def _import_lines(page: _Module, names: set[str]) -> list[str]:
    """The page's import statements cut down to `names`, in page order."""
    out: list[str] = []
    previous, gap = None, False
    for stmt in page.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            kept: ast.stmt | None = stmt
        elif isinstance(stmt, ast.ImportFrom):
            aliases = [a for a in stmt.names if (a.asname or a.name) in names]
            kept = ast.ImportFrom(stmt.module, aliases, stmt.level) if aliases else None
        elif isinstance(stmt, ast.Import):
            aliases = [a for a in stmt.names if (a.asname or a.name.split(".")[0]) in names]
            kept = ast.Import(aliases) if aliases else None
        else:
            continue
        gap = gap or (previous is not None and stmt.lineno > previous + 1)
        previous = stmt.end_lineno
        if kept is not None:
            if gap and out:
                out.append("")     # the page's groups of imports stay apart
            out.append(ast.unparse(kept))
            gap = False
    return out


def _origin(page: _Module, name: str) -> str | None:
    """The catalogue module a name is imported from, when it is a shared helper's."""
    stmt, alias = page.imports[name]
    if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("broken_models.") \
            and stmt.module not in _HARNESS_MODULES:
        return stmt.module
    return None


def case_script(case: Case, which: str = "broken", name: str | None = None) -> Script:
    """The script of `case` (its broken or fixed training function) with everything of the
    catalogue it uses; `name` renames the function (the clinics' `broken_case1_3`)."""
    if which not in ("broken", "fixed"):
        raise ValueError(f"which must be 'broken' or 'fixed', got {which!r}")
    page = _Module(importlib.import_module(case.module))
    fn_name = f"train_{which}"
    fn = page.defs[fn_name]
    builtin = set(dir(builtins))
    helpers, imported = page.closure(_names(fn) - builtin, skip=_NEVER)
    imported |= {n for n in _names(fn) if n in page.imports}
    function = page.segment(fn)
    if name is not None:
        function = function.replace(f"def {fn_name}(", f"def {name}(", 1)
    shared: dict[str, set[str]] = {}
    for n in sorted(imported):
        module = _origin(page, n)
        if module is not None:
            shared.setdefault(module, set()).add(page.imports[n][1].name)
    shared_sources = []
    for module, names in shared.items():
        lib = _Module(importlib.import_module(module))
        stmts, _ = lib.closure(names)
        shared_sources.append((module, "\n\n\n".join(lib.segment(s) for s in stmts)))
    imports = _import_lines(page, imported)
    return Script("\n".join(imports), "\n\n\n".join(page.segment(s) for s in helpers), function,
                  tuple(shared_sources))


def defined_names(script: Script) -> list[str]:
    """The top-level names `script.text` binds (helpers and the function), in order."""
    return [n for stmt in ast.parse(script.text).body for n in _bound(stmt)]


def page_imports(case: Case, which: str = "fixed") -> dict[str, Any]:
    """The objects a page's script imports at the top (name -> object): what a repair written
    like the fixed script needs in its namespace, whether or not the broken one printed it."""
    page = _Module(importlib.import_module(case.module))
    fn = page.defs[f"train_{which}"]
    _, imported = page.closure(_names(fn), skip=_NEVER)
    imported |= {n for n in _names(fn) if n in page.imports}
    return {n: getattr(page.module, n) for n in imported if hasattr(page.module, n)}
