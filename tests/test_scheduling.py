"""The suite's own scheduling (tests/conftest.py): the modules `make test` keeps whole on one
xdist worker exist and hold the shared fixture they are kept whole for, so a rename cannot
silently send a graded class's tests to both workers again (one grading, one waiting)."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SHARED_FIXTURE_MODULES

ROOT = Path(__file__).resolve().parents[1]


def _shared_fixtures(path: Path) -> list[str]:
    """Names of the fixtures in `path` built once per module or per session."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and any(
                    k.arg == "scope" and getattr(k.value, "value", None) in ("module", "session")
                    for k in deco.keywords):
                found.append(node.name)
    return found


def test_every_module_kept_whole_exists_and_shares_a_fixture():
    for module in SHARED_FIXTURE_MODULES:
        path = ROOT / module
        assert path.is_file(), f"{module} is gone: update SHARED_FIXTURE_MODULES"
        assert _shared_fixtures(path), f"{module} holds no module- or session-scoped fixture"
