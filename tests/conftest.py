"""Shared test set-up: one compute thread per xdist worker (torch and NumPy's BLAS), so two
workers share two cores instead of oversubscribing them."""
import torch
from threadpoolctl import threadpool_limits

torch.set_num_threads(1)
threadpool_limits(1)

import gc

import pytest


@pytest.fixture(autouse=True)
def no_function_mode_left_behind():
    """A test leaves torch's function-mode stack as it found it once its objects are freed:
    a debugger's mode outliving its step would slow and confuse every later torch call."""
    before = len(torch.overrides._get_current_function_mode_stack())
    yield
    if len(torch.overrides._get_current_function_mode_stack()) > before:
        gc.collect()
    left = torch.overrides._get_current_function_mode_stack()[before:]
    assert not left, f"torch function modes left on the stack: {left}"


#: test modules whose tests share a fixture built once per module or per test run at a cost
#: of seconds to minutes (a graded class, a course with its release, JupyterLab and a
#: browser): `--dist loadgroup` (the Makefile) sends each such module whole to one xdist
#: worker, so the fixture is built once and the other worker keeps running other tests
#: instead of waiting on its lock
SHARED_FIXTURE_MODULES = ("tests/test_course.py", "tests/test_grading.py",
                          "tests/test_grading_limits.py", "tests/test_browser.py")


#: fixtures that grade a whole simulated class end to end, every exercise through nbgrader and
#: `nndebug grade` (about ten minutes of both cores each): a test that uses one is `classwide`,
#: run by `make test-class` (CI runs it), not by `make test`
CLASSWIDE_FIXTURES = frozenset({"graded_class", "graded"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLASSWIDE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.classwide)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's own loadgroup reads `xdist_group` marks into node ids, which pytest 9.2's
    node ids no longer take (its groups are silently ignored): the same grouping by module."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in SHARED_FIXTURE_MODULES else nodeid

    return SharedFixtureScheduling(config, log)


@pytest.fixture()
def alembic_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """nbgrader runs the alembic beside python when it makes a gradebook."""
    import os
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
