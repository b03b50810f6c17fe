"""What `nndebug check` tells the student: the first error in their own cells (not the
NameError it causes in the tests), the failing assert line beside a bare value, and what the
test cells printed."""
from __future__ import annotations

import nbformat
import pytest

from lesson.course.learner import commands
from lesson.course.learner.catalog import Exercise
from lesson.course.learner.runner import run_notebook


def _notebook(path, answer: str, test: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    answer_cell = nbformat.v4.new_code_cell(answer)
    answer_cell.metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "my_answer",
                                        "locked": False, "schema_version": 3}
    test_cell = nbformat.v4.new_code_cell(test)
    test_cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "test_it",
                                      "points": 2, "locked": True, "schema_version": 3}
    nb.cells = [answer_cell, test_cell]
    nbformat.write(nb, path)


def _report(result) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        commands.report(Exercise("ex0", "x.ipynb", "a test exercise", ("a hint",)), result, 0)
    return out.getvalue()


@pytest.mark.slow
def test_a_syntax_error_in_an_answer_is_reported_as_such(tmp_path):
    path = tmp_path / "x.ipynb"
    _notebook(path, "def f(x):\n    return x +\n", "assert f(2) == 4")
    text = _report(run_notebook(path))
    assert "SyntaxError" in text and "my_answer, line 2" in text
    assert text.index("SyntaxError") < text.index("FAIL  test_it")


@pytest.mark.slow
def test_a_bare_value_assert_shows_its_line_and_the_prints_show(tmp_path):
    path = tmp_path / "x.ipynb"
    _notebook(path, "def f(x):\n    return 3 * x + 1\n",
              "print('suggested clip:', f(2))\nvalue = f(2)\nassert value == 4, value")
    text = _report(run_notebook(path))
    assert "AssertionError: 7" in text and "failing line: assert value == 4, value" in text
    assert "| suggested clip: 7" in text
    assert "your code raised" not in text


def _parts(path, f_body: str) -> None:
    """Two parts, each an answer cell and its test; part 2 is still the release's stub, a
    top-level `raise NotImplementedError` (as ex3's find_best_lr)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for grade_id, source, grade in [
            ("part1", f"def f(x):\n    {f_body}\n", False),
            ("test_part1", "assert f(2) == 4", True),
            ("part2", "# YOUR CODE HERE\nraise NotImplementedError()\nresult = 1\n", False),
            ("test_part2", "assert result == 1", True)]:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": grade, "solution": not grade, "grade_id": grade_id,
                                     "locked": grade, "schema_version": 3,
                                     **({"points": 1} if grade else {})}
        nb.cells.append(cell)
    nbformat.write(nb, path)


@pytest.mark.slow
def test_a_later_parts_stub_does_not_lead_the_first_failure_above_it(tmp_path):
    path = tmp_path / "x.ipynb"
    _parts(path, "return 3 * x")                  # part 1 written, wrong; part 2 not started
    text = _report(run_notebook(path))
    assert "your code raised" not in text and "fix this first" not in text
    assert "first failure, test_part1" in text
    assert "part2 is not written yet: NotImplementedError, line 2" in text

    _parts(path, "return 2 * x")                  # part 1 passes: the stub is what fails now
    text = _report(run_notebook(path))
    assert "your code raised an error first, in part2, line 2" in text
    assert text.index("your code raised") < text.index("PASS  test_part1")
