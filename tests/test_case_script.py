"""What a student can read of a case: all of its code, and nothing that names the bug.

`show_case` prints a case's broken script with every definition it uses, and defines it in the
notebook compiled under the case's neutral label, so `inspect.getsource`, `??`, a traceback or
a class's `__module__` lead to `case1_3.py`, never to `broken_models/.../<the bug's name>.py`.
"""
from __future__ import annotations

import inspect
import types

import pytest

from broken_models import CATALOGUE
from broken_models.script import case_script, defined_names, page_imports
from lesson.course.learner.clinic import show_case
from lesson.course.learner.clinics import clinic_cases, find_clinic_case

CASES = clinic_cases()


def _code_objects(obj: object) -> list[types.CodeType]:
    """The code of a function, or of every method of a class, nested functions included."""
    if isinstance(obj, type):
        fns = [v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
               for v in vars(obj).values()]
        fns = [f for f in fns if isinstance(f, types.FunctionType)]
    else:
        fns = [obj]
    out, todo = [], [f.__code__ for f in fns]
    while todo:
        code = todo.pop()
        out.append(code)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return out


def _spoilers(case) -> list[str]:
    page = case.case
    return [page.name, page.module, page.module.replace(".", "/"), page.title]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.ident)
def test_nothing_a_student_can_inspect_names_the_bug(case, capsys):
    namespace: dict = {}
    show_case(case.ident, into=namespace)
    printed = capsys.readouterr().out
    script = case_script(case.case, "broken", case.broken)
    mine = [namespace[n] for n in defined_names(script)]
    assert namespace[case.broken] in mine
    for obj in mine:
        if not isinstance(obj, (type, types.FunctionType)):
            continue
        obj = inspect.unwrap(obj)    # a decorated helper (torch.no_grad) shows its own code
        seen = [inspect.getsourcefile(obj), obj.__module__, obj.__qualname__, obj.__doc__ or "",
                inspect.getsource(obj)]
        seen += [c.co_filename for c in _code_objects(obj)]
        for text in seen:
            for spoiler in _spoilers(case):
                assert spoiler not in text, f"{case.ident}: {obj.__qualname__} shows {spoiler!r}"
        assert inspect.getsourcefile(obj) == f"{case.ident}.py"
        assert inspect.getsource(obj).strip() in printed, "what inspect shows is what was printed"
    for spoiler in _spoilers(case):
        assert spoiler not in printed


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.ident)
def test_every_function_and_class_the_script_uses_is_printed(case, capsys):
    """Everything the script reaches of the catalogue (its page's helpers, the shared ones, and
    what those call in turn) is on the screen; only torch, the tools and the harness's
    Outcome are not."""
    namespace: dict = {}
    show_case(case.ident, into=namespace)
    printed = capsys.readouterr().out
    todo, seen = [namespace[case.broken]], set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        module = getattr(obj, "__module__", "") or ""
        ours = module == case.ident or (module.startswith("broken_models.")
                                        and module != "broken_models.case")
        if not ours:
            continue
        source = inspect.getsource(obj)
        assert source.strip() in printed, f"{case.ident}: {obj.__qualname__} is not printed"
        scope = vars(inspect.getmodule(obj)) if module != case.ident else namespace
        for code in _code_objects(getattr(obj, "__wrapped__", obj)):
            todo.extend(scope[n] for n in code.co_names
                        if n in scope and isinstance(scope[n], (type, types.FunctionType)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.ident)
def test_the_shown_script_runs_and_a_repair_written_like_the_fix_finds_its_names(case, capsys):
    """The fixed script needs nothing of its page that the broken one does not print (a helper
    only the fix used would give the fix away), so a repair has every name it needs."""
    namespace: dict = {}
    show_case(case.ident, into=namespace)
    capsys.readouterr()
    broken = set(defined_names(case_script(case.case, "broken")))
    fixed = set(defined_names(case_script(case.case, "fixed")))
    assert fixed - {"train_fixed"} <= broken - {"train_broken"}
    assert set(page_imports(case.case)) <= set(namespace)


def test_the_shown_script_is_the_catalogues_and_trains_the_same():
    case = find_clinic_case("layers_in_python_list")
    namespace: dict = {}
    show_case(case.ident, into=namespace)
    shown = namespace[case.broken](1)
    page = case.case.run_broken(1)
    assert shown.metrics["losses"] == page.metrics["losses"]
    assert [f.code for f in shown.findings] == page.codes
    assert "train_fixed" not in namespace and "SYMPTOM_CHECK" not in namespace


def test_the_cli_prints_the_same_script_with_its_helpers():
    from lesson.course.browse import show_case as browse_show

    case = CATALOGUE["detach_in_forward"]
    label = find_clinic_case(case.name).ident
    text = browse_show(label)
    assert case_script(case).text in text and "class " in text
    assert "def digits(" in text, "the shared helpers it imports are printed too"
    assert case_script(case, "fixed").text in browse_show(label, diff=True, source="fixed")
    with pytest.raises(ValueError, match="which must be"):
        case_script(case, "repaired")


def test_a_fresh_namespace_is_shown_every_shared_helper_even_at_a_dead_ones_address(capsys):
    """show_case remembers what it printed in the namespace itself: a new dict that Python
    places where a dead one was (same id()) is shown every helper again."""
    case = CASES[0]
    first: dict = {}
    show_case(case.ident, into=first)
    whole = capsys.readouterr().out
    assert "are printed above" not in whole
    show_case(case.ident, into=first)
    assert "are printed above" in capsys.readouterr().out     # the same namespace: once
    for _ in range(20):                                        # fresh dicts, often at old ids
        show_case(case.ident, into={})
        assert "are printed above" not in capsys.readouterr().out
