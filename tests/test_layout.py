"""The layout is the architecture: imports run one way, with no cycles, and only the course's
face (`lesson.course`) imports the catalogue.

Every import statement counts (module level, inside functions, under TYPE_CHECKING) and so do
`importlib.import_module("...")` calls with a literal name.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lesson", "broken_models")

#: sub-packages of lesson from the bottom up: a layer imports only its own and lower ones
LAYERS = ("lesson", "lesson.production", "lesson.debugger", "lesson.data", "lesson.checks",
          "broken_models", "lesson.course")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that `name` names or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that `module` imports anywhere in its source."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int:
    if module == "lesson.__main__":  # `python -m lesson` runs the course's demo
        return LAYERS.index("lesson.course")
    return max(i for i, name in enumerate(LAYERS)
               if module == name or module.startswith(name + "."))


def test_the_checker_sees_a_cycle_and_a_function_level_import(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from lesson.debugger import rules\n"
                      "import importlib\nimportlib.import_module('broken_models.case')\n")
    modules = project_modules()
    assert imports_of("x", source, modules) == {"lesson.debugger", "lesson.debugger.rules",
                                                 "broken_models.case"}


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 60, "the checker found too few modules to be looking in the right place"
    assert cycles(graph) == []


def test_only_the_course_imports_the_catalogue() -> None:
    offenders = sorted(
        f"{m} imports {t}" for m, targets in import_graph().items() for t in targets
        if t.split(".")[0] == "broken_models" and m.split(".")[0] == "lesson"
        and not (m == "lesson.course" or m.startswith("lesson.course.")))
    assert offenders == []


@pytest.mark.parametrize("lower, upper", [(LAYERS[i], LAYERS[i + 1])
                                          for i in range(len(LAYERS) - 1)])
def test_imports_point_down(lower: str, upper: str) -> None:
    """No module of `lower`'s layer or below imports one of `upper`'s layer or above."""
    limit = LAYERS.index(lower)
    upward = sorted(f"{m} imports {t}" for m, targets in import_graph().items()
                    if layer(m) <= limit for t in targets if layer(t) > limit)
    assert upward == []
