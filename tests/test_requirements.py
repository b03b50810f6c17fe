"""Each requirement an exercise's text states is checked on an example by its visible tests,
and `nndebug check` says which are met: an answer that ignores one no longer shows full marks
on the visible tests and loses its points only at grading."""
from __future__ import annotations

import nbformat

from lesson.course.learner.commands import requirement_status
from lesson.course.learner.runner import CellResult, CheckResult
from tests.test_learner import EXERCISES, ROOT, cli, course_copy, solve

WRITTEN = [e for e in EXERCISES if not e.name.startswith("clinic")]


def _visible(ex, test: str) -> str:
    nb = nbformat.read(ex.solution(ROOT), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == test)
    return cell.source.split("### BEGIN HIDDEN TESTS")[0]


def test_every_requirement_is_an_assert_message_of_its_visible_test():
    assert all(e.requirements for e in WRITTEN)
    for ex in WRITTEN:
        for test, texts in ex.requirements:
            visible = _visible(ex, test)
            positions = [visible.find(text) for text in texts]
            assert -1 not in positions, (ex.name, test, texts, positions)
            assert positions == sorted(positions), f"{ex.name}/{test}: list them in assert order"


def test_status_marks_the_failed_requirement_and_the_ones_after_it():
    ex = WRITTEN[0]
    test, texts = ex.requirements[2]          # suggest_clip_value: three requirements
    failing = CellResult(test, 2.0, False, f"AssertionError: {texts[1]}: expected 3.0, got nan", "")
    result = CheckResult(ex.solution(ROOT), [failing], "", None)
    rows = [r for r in requirement_status(ex, result) if r[0] == test]
    assert [r[2] for r in rows] == ["met", "NOT MET", "not reached"]
    crashed = CellResult(test, 2.0, False, "NameError: name 'np' is not defined", "")
    rows = requirement_status(ex, CheckResult(ex.solution(ROOT), [crashed], "", None))
    assert {r[2] for r in rows} == {"not reached"}


def test_check_names_the_requirement_an_answer_ignores(tmp_path, capsys):
    """ex1 with `>=` for "strictly above": the visible test fails and says which requirement."""
    root = course_copy(tmp_path, names=["ex1_exploding_gradients"])
    path = solve(root, "ex1_exploding_gradients")
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == "exploding_steps")
    cell.source = cell.source.replace("> threshold", ">= threshold")
    nbformat.write(nb, path)
    assert cli("check", root, "ex1") == 1
    out = capsys.readouterr().out
    assert "FAIL  test_exploding_steps" in out
    assert "NOT MET      strictly above: a norm equal to the threshold is not" in out
    assert "met          a grad_norm of None is left out" in out


def test_the_round_off_message_shows_values_that_differ():
    """ex5: an array put back by `+= eps; -= eps` differs by round-off only; the message shows
    the two arrays at full precision, not two identical-looking ones."""
    import numpy as np

    def numerical_gradient(loss_at, array, eps=1e-5):
        grad = np.zeros_like(array)
        for i in np.ndindex(array.shape):
            array[i] += eps
            plus = loss_at()
            array[i] -= 2 * eps
            minus = loss_at()
            array[i] += eps                       # back, give or take a round-off
            grad[i] = (plus - minus) / (2 * eps)
        return grad

    ex = next(e for e in WRITTEN if e.name == "ex5_gradient_check")
    try:
        exec(_visible(ex, "test_numerical_gradient"),
             {"np": np, "numerical_gradient": numerical_gradient})
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("the visible test passed an array changed by round-off")
    assert message.startswith("the array is left exactly as it was found: ")
    kept, became = message.split(": ", 1)[1].split(" became ")
    assert kept != became, message
