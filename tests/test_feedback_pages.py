"""What a returned feedback page may show (lesson.course.grading.feedback), without nbgrader
running: test cells as released with their points, errors cut to the student's part, and the
check that finds a hidden line in a page."""
from __future__ import annotations

from pathlib import Path

import nbformat

from lesson.course.grading.feedback import (HIDDEN_NOTE, HideHiddenTests, _students_part,
                                            hidden_source, leaks, page_text)

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def _cell(source: str, *, grade: bool, solution: bool = False, **meta) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": grade, "solution": solution, "grade_id": "t1",
                                 "locked": not solution, "schema_version": 3, **meta}
    return cell


def _hide(cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    return nb.cells[0]


def test_lines_after_the_hidden_block_are_shown_again():
    cell = _hide(_cell(f"a = 1\n{BEGIN}\nsecret()\n{END}\nassert a == 1", grade=True,
                       points=2, score=2.0))
    assert cell.source.splitlines() == ["# t1: 2 of 2 points", "a = 1", HIDDEN_NOTE,
                                        "assert a == 1"]


def test_points_that_are_not_numbers_read_as_a_question_mark():
    cell = _hide(_cell("assert True", grade=True, points="three"))
    assert cell.source.splitlines()[0] == "# t1: ? of ? points"


def test_an_answer_cell_that_is_also_graded_is_left_as_written():
    source = f"def f():\n    return 1\n{BEGIN}\nnot a test\n{END}"
    assert _hide(_cell(source, grade=True, solution=True, points=1)).source == source
    assert _hide(_cell(source, grade=False)).source == source


def test_a_markdown_test_cell_is_named_and_keeps_no_outputs_to_cut():
    cell = nbformat.v4.new_markdown_cell(f"Explain.\n{BEGIN}\nthe rubric\n{END}")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t1",
                                 "points": 1, "score": 1, "schema_version": 3}
    assert _hide(cell).source.splitlines() == ["# t1: 1 of 1 points", "Explain.",
                                               HIDDEN_NOTE]


def test_an_error_keeps_the_students_frames_after_its_message():
    out = {"ename": "ValueError", "evalue": "bad x", "traceback": [
        "\x1b[0;31mCell In[3], line 2\x1b[0m\n", "    assert f(secret) == 1\n",
        "ValueError: bad x\n", "Cell In[1], line 3, in f\n    raise ValueError('bad x')\n"]}
    assert _students_part(out) == ["ValueError: bad x",
                                   "Cell In[1], line 3, in f\n    raise ValueError('bad x')"]
    assert _students_part({"ename": "E", "evalue": "m", "traceback": ["other text"]}) == \
        ["E: m"]


def _notebook(path: Path, *sources: str) -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s)
                                                   for s in sources]), path)
    return path


def test_hidden_source_keeps_only_lines_no_page_shows_anyway(tmp_path):
    solution = _notebook(tmp_path / "solution.ipynb",
                         "def f(x):\n    return helper(x) + 1",
                         f"assert f(1) == 2\n{BEGIN}\nassert f(12345) == 12346\n"
                         f"  x = 1\n    return helper(x) + 1\nassert visible()\n{END}\n"
                         "assert after_the_block()")
    release = _notebook(tmp_path / "release.ipynb", "assert f(1) == 2\nassert visible()")
    assert hidden_source(solution, release) == {"assert f(12345) == 12346"}


def test_a_page_leaks_a_hidden_line_or_a_marker(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<pre>assert&nbsp;f(12345)   ==  12346</pre>\n<p>ok &amp; done</p>")
    assert page_text(page).splitlines() == ["assert f(12345) == 12346", "ok & done"]
    assert leaks(page, {"assert f(12345) == 12346", "assert other()"}) == \
        ["assert f(12345) == 12346"]
    page.write_text(f"<pre>{BEGIN}</pre><pre>{END}</pre>")
    assert leaks(page, set()) == ["BEGIN HIDDEN TESTS", "END HIDDEN TESTS"]   # nbgrader's
    page.write_text("<pre>nothing hidden</pre>")
    assert leaks(page, {"assert f(12345) == 12346"}) == []


def test_a_traceback_that_starts_with_the_message_keeps_what_follows():
    out = {"ename": "KeyError", "evalue": "'w'", "traceback": ["KeyError: 'w'\n", "in f\n"]}
    assert _students_part(out) == ["KeyError: 'w'", "in f"]


def test_hidden_lines_of_seven_characters_count_and_of_six_do_not(tmp_path):
    solution = _notebook(tmp_path / "s.ipynb", f"{BEGIN}\nf(1234)\nf(123)\n{END}")
    release = _notebook(tmp_path / "r.ipynb", "pass")
    assert hidden_source(solution, release) == {"f(1234)"}


def test_generate_feedback_names_each_assignment_it_failed_on(tmp_path):
    from lesson.course.grading.feedback import generate_feedback

    failed = generate_feedback(tmp_path, f"sqlite:///{tmp_path / 'gradebook.db'}", ["a1", "a2"])
    assert [f.split(" ", 1)[0] for f in failed] == ["a1", "a2"]
    assert "ERROR" in failed[0] and "No notebooks were matched" in failed[0]
