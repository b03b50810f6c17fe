"""What one notebook meets in the clean room, and what `nndebug grade` says when something
around the class fails: syntax errors named, tracebacks at the student's line, endless loops
bounded (the per-call timeout, the retry after a timeout, the notebook's budget and its
default), memory limits refused or applied, feedback without hidden tests, exit codes."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from lesson.course.grading import budget as bdg
from lesson.course.grading.cleanroom import RETRY_FLOOR_S, grade_notebook
from lesson.course.grading.sandbox import COURSE_WORKING_MB, Limits, Sandbox, memory_floor_mb
from lesson.course.learner.classroom import copy_course, generate_release

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def alembic_on_path(monkeypatch):
    """nbgrader's Gradebook runs the `alembic` beside this interpreter to make a new one."""
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))


def notebook(*cells: tuple[str, str, int]) -> nbformat.NotebookNode:
    """A sanitized notebook: (kind, source, points) per cell; kind is answer, test or setup."""
    nb = nbformat.v4.new_notebook()
    for i, (kind, source, points) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        meta = {"grade_id": f"{kind}{i}", "locked": kind != "answer",
                "solution": kind == "answer", "grade": kind == "test", "schema_version": 3}
        if kind == "test":
            meta["points"] = points
        cell.metadata["nbgrader"] = meta
        nb.cells.append(cell)
    return nb


def errors(nb, index: int) -> list[dict]:
    return [o for o in nb.cells[index].outputs if o["output_type"] == "error"]


# -- errors named -----------------------------------------------------------------------------

@pytest.mark.parametrize("source, kind, line", [
    ("def f(x):\n    for i in range(x)\n        pass\n", "SyntaxError", 2),
    ("def f(x):\n    y = x\n      return y\n", "IndentationError", 3),
    ("x = 1\nreturn x\n", "SyntaxError", 2),             # found by the compiler, not the parser
])
def test_a_syntax_error_in_an_answer_is_named_with_its_cell_and_line(source, kind, line):
    nb = notebook(("answer", source, 0), ("test", "assert f(1) is None\n", 1))
    verdicts = grade_notebook(nb, Limits(timeout_s=20))
    assert verdicts.error is None, verdicts.error
    (error,) = errors(nb, 0)
    assert error["ename"] == kind and f"line {line} of answer cell answer0" in error["evalue"]
    assert f'File "<cell answer0>", line {line}' in error["traceback"][0]
    assert "sandbox exited" not in str(nb.cells[0].outputs)
    (test_error,) = errors(nb, 1)                        # the test says why f is missing
    assert test_error["ename"] == "NameError"
    assert f"answer cell answer0 did not run: {kind} at line {line}" in test_error["evalue"]
    assert verdicts.unrun == {"answer0": f"{kind} at line {line}"}


def test_a_students_traceback_points_at_the_students_line():
    source = ("def f(x):\n"
              "    '''a docstring'''\n"
              "    y = x * 2\n"
              "    raise ValueError(f'bad {y}')\n")
    nb = notebook(("answer", source, 0), ("test", "f(3)\n", 1))
    grade_notebook(nb, Limits(timeout_s=20))
    (error,) = errors(nb, 1)
    text = "".join(error["traceback"])
    assert error["ename"] == "ValueError" and error["evalue"] == "bad 6"
    assert 'File "<cell answer0>", line 4, in f' in text
    assert "raise ValueError(f'bad {y}')" in text
    assert "<answer" not in text and "a docstring" not in text     # the stand-in's frame


# -- endless loops bounded ------------------------------------------------------------------

@pytest.mark.slow
def test_a_top_level_loop_after_right_definitions_keeps_their_points():
    source = ("def f(x):\n    return x + 1\n\n"
              "import time\nwhile True:\n    time.sleep(0.05)\n\n"
              "def g(x):\n    return x\n")
    nb = notebook(("answer", source, 0), ("test", "assert f(1) == 2\n", 2),
                  ("test", "assert g(1) == 1\n", 1))
    verdicts = grade_notebook(nb, Limits(timeout_s=3))
    (error,) = errors(nb, 0)
    assert error["ename"] == "TimeoutError" and "what it defined before line 5" in error["evalue"]
    assert not errors(nb, 1)                         # f was defined before the loop
    assert "NameError" in verdicts.failed["test2"]  # g never was, as in a kernel


#: top-level code that ends an answer cell early, after a right definition: an error, and
#: a read far past an array's end (SIGSEGV: the sandbox dies mid-cell)
ENDINGS = {
    "an error": ("raise ValueError('not finished')\n", "ValueError", "not finished"),
    "a crash": ("import numpy as np\n"
                "print(np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2,),\n"
                "                                      strides=(1 << 44,)).sum())\n",
                "RuntimeError", "the sandbox died of SIGSEGV"),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_right_definition_keeps_its_points_however_its_cell_ends(ending):
    """As in a kernel: what the cell's statements before the failing one defined is
    defined; what comes after is not."""
    code, ename, says = ENDINGS[ending]
    source = "def f(x):\n    return x + 1\n\n" + code + "\ndef g(x):\n    return x\n"
    nb = notebook(("answer", source, 0), ("test", "assert f(1) == 2\n", 2),
                  ("test", "assert g(1) == 1\n", 1), ("answer", "h = f(2)\n", 0),
                  ("test", "assert h == 3\n", 1))
    verdicts = grade_notebook(nb, Limits(timeout_s=20))
    assert verdicts.error is None, verdicts.error
    (error,) = errors(nb, 0)
    assert error["ename"] == ename and says in error["evalue"], error
    assert not errors(nb, 1) and not errors(nb, 4), verdicts.failed   # f, and a later cell
    assert sorted(verdicts.failed) == ["test2"] and "NameError" in verdicts.failed["test2"]


@pytest.mark.slow
def test_a_function_that_timed_out_is_not_given_the_full_timeout_again():
    source = ("import time\n\n"
              "def f(x):\n"
              "    while x < 0:\n"
              "        time.sleep(0.05)\n"
              "    return x\n")
    timeout = RETRY_FLOOR_S + 4
    nb = notebook(("answer", source, 0), ("test", "assert f(1) == 1\n", 1),
                  ("test", "f(-1)\n", 1), ("test", "f(-2)\n", 1), ("test", "assert f(2) == 2\n", 1))
    start = time.monotonic()
    verdicts = grade_notebook(nb, Limits(timeout_s=timeout))
    took = time.monotonic() - start
    assert f"f ran longer than {timeout:g} s (interrupted)" in errors(nb, 2)[0]["evalue"]
    assert f"f ran longer than {RETRY_FLOOR_S:g} s again" in errors(nb, 3)[0]["evalue"]
    assert not errors(nb, 1) and not errors(nb, 4)   # its quick calls still count
    assert sorted(verdicts.failed) == ["test2", "test3"]
    assert took < 2 * timeout + 10, took             # not two full timeouts


@pytest.mark.slow
def test_the_notebooks_budget_stops_the_students_code_and_the_rest_scores_zero():
    source = "import time\n\ndef f(x):\n    time.sleep(1.0)\n    return x\n"
    tests = [("test", f"assert f({i}) == {i}\n", 1) for i in range(8)]
    nb = notebook(("answer", source, 0), *tests)
    verdicts = grade_notebook(nb, Limits(timeout_s=20, budget_s=3.5))
    passed = [i for i in range(1, 9) if not errors(nb, i)]
    assert passed == [1, 2, 3], verdicts.failed     # about three calls fit in 3.5 s
    assert all("time budget (3.5 s for the student's code) is spent" in errors(nb, i)[0]["evalue"]
               for i in range(5, 9))
    assert verdicts.spent < 6


@pytest.mark.slow
def test_a_sandboxs_restart_is_the_graders_time_not_the_students():
    """After a call times out the sandbox starts again (a new interpreter imports torch):
    the budget counts the student's code only, so a quick function still gets its points."""
    source = ("import time\n\ndef f(x):\n    while True:\n        time.sleep(0.05)\n\n"
              "def g(x):\n    return x\n")
    nb = notebook(("answer", source, 0), ("test", "f(1)\n", 1), ("test", "assert g(1) == 1\n", 1))
    verdicts = grade_notebook(nb, Limits(timeout_s=3, budget_s=4))
    assert "f ran longer than 3 s" in errors(nb, 1)[0]["evalue"]
    assert not errors(nb, 2), errors(nb, 2)                  # g ran after the restart
    assert 3 <= verdicts.spent < 4, verdicts.spent


@pytest.mark.slow
def test_the_default_budget_is_a_few_times_the_solutions_time_and_is_kept(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    solution = ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb"
    normal = bdg.normal_time(url, "ex5_gradient_check", "gradient_check", solution,
                             timeout_s=30, memory_mb=3072, deny=[str(ROOT)])
    assert normal is not None and 0 < normal < 30
    digest = bdg.digest(solution.read_text())
    assert bdg.recorded(url, "ex5_gradient_check", "gradient_check", digest) == normal
    assert bdg.recorded(url, "ex5_gradient_check", "gradient_check", "another") is None
    assert bdg.budget_for(normal, 30) == max(bdg.BUDGET_FACTOR * normal, 60)
    assert bdg.budget_for(100.0, 30) == 100.0 * bdg.BUDGET_FACTOR


# -- memory --------------------------------------------------------------------------------

HOG = ("got = 0\n"
       "chunks = []\n"
       "try:\n"
       "    while True:\n"
       "        chunks.append(bytearray(16 << 20))\n"
       "        got += 16\n"
       "except MemoryError:\n"
       "    pass\n"
       "size = [int(l.split()[1]) // 1024 for l in open('/proc/self/status')\n"
       "        if l.startswith('VmPeak')][0]\n"
       "chunks = None\n")


def test_a_memory_limit_above_the_courses_need_is_applied():
    from lesson.course.grading import zygote

    floor = memory_floor_mb(zygote.prewarm())
    limit = floor + 256
    box = Sandbox(limits=Limits(timeout_s=60, memory_mb=limit))
    try:
        reply = box.request(("cell", HOG, "hog", ["got", "size"]))
    finally:
        box.close()
    got = reply["names"]["got"]["value"]
    peak = reply["names"]["size"]["value"]
    assert reply["ok"], reply["error"]
    assert peak <= limit, (peak, limit)                  # stopped at the limit
    assert got >= 128, got                               # and not before it: the headroom is real
    assert COURSE_WORKING_MB >= 310                      # what the solutions need, measured


def test_a_memory_limit_below_the_courses_need_is_refused_with_the_minimum():
    from lesson.course.grading.sandbox import MemoryTooLow

    nb = notebook(("answer", "x = 1\n", 0), ("test", "assert x == 1\n", 1))
    with pytest.raises(MemoryTooLow, match=r"at least \d+ MB"):
        grade_notebook(nb, Limits(timeout_s=20, memory_mb=50))


@pytest.mark.slow
def test_plain_autograde_below_the_courses_need_leaves_the_submission_ungraded(course,
                                                                                 tmp_path):
    """nbgrader autograde --CleanRoomExecute.memory_mb=50: no zeros saved; the status says
    why, with the minimum, and the export has no score for it."""
    import csv

    from lesson.course.grading import status
    from lesson.course.learner.classroom import nbgrader

    root = Path(shutil.copytree(course, tmp_path / "course"))
    run = nbgrader(root, "autograde", "ex5_gradient_check", "--force",
                   "--CleanRoomExecute.memory_mb=50", check=False)
    line = re.search(r"^model/ex5_gradient_check: ungraded: .*$", run.stdout, re.M)
    assert line and re.search(r"50 MB is below what the course needs: at least \d+ MB",
                              line.group()), run.stdout + run.stderr[-3000:]
    state = status.read(f"sqlite:///{root / 'gradebook.db'}")[("model", "ex5_gradient_check")]
    assert not state.graded and "at least" in state.detail, state
    nbgrader(root, "export", "--to", "grades.csv")
    with (root / "grades.csv").open(newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["student_id"] == "model"
                   and r["assignment"] == "ex5_gradient_check")
    assert row["score"] == "" and row["status"].startswith("ungraded: a memory limit of 50 MB")
    assert not (root / "autograded" / "model" / "ex5_gradient_check").exists()


# -- feedback ------------------------------------------------------------------------------

def test_feedback_shows_a_tests_name_points_and_message_but_no_hidden_line():
    from lesson.course.grading.feedback import HIDDEN_NOTE, HideHiddenTests

    nb = notebook(("answer", "def f(x):\n    return x\n", 0),
                  ("test", "assert f(1) == 1\n### BEGIN HIDDEN TESTS\n"
                           "for seed in (5, 11):\n    assert f(seed) == seed + 1, 'off by one'\n"
                           "### END HIDDEN TESTS\n", 3))
    cell = nb.cells[1]
    cell.metadata["nbgrader"]["score"] = 0
    cell.outputs = [nbformat.v4.new_output(
        "error", ename="AssertionError", evalue="off by one",
        traceback=["\x1b[0;31mCell In[2], line 4\x1b[0m\n", "for seed in (5, 11):\n",
                   "AssertionError: off by one"])]
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[1].source.splitlines() == ["# test1: 0 of 3 points", "assert f(1) == 1",
                                               HIDDEN_NOTE]
    assert nb.cells[1].outputs[0]["traceback"] == ["AssertionError: off by one"]
    assert nb.cells[0].source == "def f(x):\n    return x\n"     # answers stay as written


# -- exit codes ----------------------------------------------------------------------------

def nndebug(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]))
    return subprocess.run([sys.executable, "-c", "import sys; from lesson.course.cli import main; "
                           "sys.exit(main())", "grade", "--no-progress", *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course with its release generated and one submission (the model's ex5)."""
    from lesson.course.learner.classroom import submit

    root = copy_course(ROOT, tmp_path_factory.mktemp("limits") / "course")
    generate_release(root)
    submit(root, "model", "ex5_gradient_check",
           ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb")
    return root


def one_clear_line(run: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr[:3000]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--budget", "0"], "--budget must be positive"),
    (["--db", "mysql://x"], "--db must be sqlite"),
    (["no_such_assignment"], "no assignment no_such_assignment"),
    (["--student", "nobody"], "no submission from nobody"),
    (["--export", "/no/such/folder/grades.csv"], "no folder /no/such/folder"),
])
def test_usage_errors_exit_2_with_one_line(course, args, says):
    run = nndebug(course, *args)
    assert run.returncode == 2 and says in one_clear_line(run), run.stderr


@pytest.mark.slow
def test_memory_below_the_courses_need_exits_2_with_the_minimum(course):
    run = nndebug(course, "--workers", "1", "--memory", "50")
    line = one_clear_line(run)
    assert run.returncode == 2 and re.search(r"50 MB is below what the course needs: at least "
                                             r"\d+ MB", line), run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["no course", "database", "scheduler", "sqlite folder"])
def test_infrastructure_failures_exit_3_with_one_line_and_what_to_do(course, tmp_path, case):
    where, args = course, []
    if case == "no course":
        where = tmp_path
    elif case == "database":
        args = ["--db", f"postgresql://nobody@127.0.0.1:{_free_port()}/course"]
    elif case == "scheduler":
        args = ["--scheduler", f"tcp://127.0.0.1:{_free_port()}", "--connect-timeout", "3",
                "--force"]
    else:
        args = ["--db", f"sqlite:///{tmp_path}/no/such/folder/gradebook.db"]
    run = nndebug(where, *args)
    line = one_clear_line(run)
    assert run.returncode == 3 and "What to do:" in line, run.stderr
    assert {"no course": "nbgrader_config.py", "database": "cannot open the gradebook",
            "scheduler": "no Dask scheduler answers", "sqlite folder": "cannot open the gradebook"
            }[case] in line
    debug = nndebug(where, *args, "--debug")
    assert debug.returncode == 3 and "Traceback" in debug.stderr or case == "no course"


# -- statuses and the export ---------------------------------------------------------------

def test_statuses_fold_per_submission_and_the_export_leaves_ungraded_scores_empty(tmp_path):
    """Ungraded wins over tampering, tampering over graded; late comes from nbgrader's due
    date; an ungraded row has no score, a graded one nbgrader's, a missing one nbgrader's 0."""
    from nbgrader.api import Gradebook

    from lesson.course.grading import status
    from lesson.course.grading.export import export_csv

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a1", duedate="2030-01-01 00:00:00")
        gb.add_notebook("nb1", "a1")
        gb.add_notebook("nb2", "a1")
        for name in ("ok", "late", "cheat", "broken", "absent"):
            gb.add_student(name)
        for name in ("ok", "cheat", "broken"):
            gb.add_submission("a1", name, timestamp="2029-12-31 00:00:00")
        gb.add_submission("a1", "late", timestamp="2030-01-02 00:00:00")
    status.write(url, "ok", "a1", {"nb1": (status.GRADED, ""), "nb2": (status.GRADED, "")})
    status.write(url, "late", "a1", {"nb1": (status.GRADED, "")})
    status.write(url, "cheat", "a1", {"nb1": (status.TAMPERING, "uses os.kill"),
                                      "nb2": (status.GRADED, "")})
    status.write(url, "broken", "a1", {"nb1": (status.TAMPERING, "uses os.kill"),
                                       "nb2": (status.UNGRADED, "nb2.ipynb is not a notebook")},
                 fingerprint="abc")
    states = status.read(url)
    assert {k[0]: v.label for k, v in states.items()} == {
        "ok": "graded", "late": "late", "cheat": "tampering: uses os.kill",
        "broken": "ungraded: nb2.ipynb is not a notebook"}
    assert states[("broken", "a1")].fingerprint == "abc" and not states[("broken", "a1")].graded
    export_csv(url, tmp_path / "grades.csv")
    import csv

    rows = {r["student_id"]: r for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert rows["broken"]["score"] == "" and rows["broken"]["raw_score"] == ""
    assert rows["ok"]["score"] == "0.0" and rows["ok"]["status"] == "graded"
    assert rows["absent"]["score"] == "0.0" and rows["absent"]["status"] == "not submitted"
    assert list(rows["ok"])[-1] == "status"
