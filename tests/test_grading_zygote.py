"""The zygote: one warm `python -I` per grading process that forks the clean room's processes.

A forked child must behave as the fresh interpreter it replaces: its exit code, output, time
limit and random state its own, and the student's sandbox holding nothing of the notebook (it
is forked before the trusted process reads the tests) nor able to read the grader's memory.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import nbformat
import pytest

from lesson.course.grading import zygote
from lesson.course.grading.cleanroom import grade_notebook

ROOT = Path(__file__).resolve().parents[1]


def run_script(z: zygote.Zygote, tmp_path: Path, source: str, timeout: float = 60
               ) -> tuple[int | None, str]:
    """Fork a child of `z` that runs `source` as a script; its exit code and output."""
    script = tmp_path / f"script{time.monotonic_ns()}.py"
    script.write_text(source)
    log = tmp_path / f"{script.stem}.log"
    code = z.run("runpy:run_path", {"path_name": str(script)}, cwd=tmp_path, log=log,
                 timeout=timeout)
    return code, log.read_text() if log.is_file() else ""


@pytest.fixture(scope="module")
def warm():
    z = zygote.Zygote()
    yield z
    z.close()


def test_a_forked_child_has_its_own_exit_code_output_and_folder(warm, tmp_path):
    code, out = run_script(warm, tmp_path, "import os, sys, torch\n"
                           "print('cwd', os.getcwd()); print('torch', torch.__version__)\n"
                           "print('session leader', os.getsid(0) == os.getpid())\n"
                           "sys.exit(3)\n")
    assert code == 3
    assert f"cwd {tmp_path}" in out and "torch 2." in out and "session leader True" in out
    code, out = run_script(warm, tmp_path, "raise ValueError('a bad target')\n")
    assert code == 1 and "ValueError: a bad target" in out


def test_a_child_past_its_deadline_is_killed_with_what_it_started(warm, tmp_path):
    marker = tmp_path / "grandchild.pid"
    start = time.monotonic()
    code, _ = run_script(warm, tmp_path, "import os, time\n"
                         f"if os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n"
                         f"open({str(marker)!r}, 'w').write('x')\ntime.sleep(60)\n", timeout=2)
    assert code is None and time.monotonic() - start < 20
    assert marker.is_file()
    code, out = run_script(warm, tmp_path, "print('next')\n")   # the zygote serves on
    assert code == 0 and "next" in out


def test_forked_children_draw_their_own_random_numbers(warm, tmp_path):
    draw = "import random, numpy\nprint(random.random(), numpy.random.rand())\n"
    first, second = (run_script(warm, tmp_path, draw)[1] for _ in range(2))
    assert first.strip() and first != second


def test_a_zygote_that_died_is_reported_and_the_pool_starts_another(tmp_path):
    with zygote.zygote() as z:
        assert run_script(z, tmp_path, "pass\n")[0] == 0
        os.killpg(z.proc.pid, signal.SIGKILL)
        z.proc.wait()
        with pytest.raises(zygote.ZygoteGone):
            run_script(z, tmp_path, "pass\n")
    with zygote.zygote() as fresh:
        assert fresh is not z and run_script(fresh, tmp_path, "pass\n")[0] == 0


# -- the clean room through the zygote -------------------------------------------------------

SECRET_HEAD, SECRET_TAIL = "tq8-hidden-", "zx5"
SCAN = f'''
import os

def scan_memory(pid="self"):
    """How often the hidden test's marker is in the memory of process `pid`."""
    head, tail = {SECRET_HEAD!r}.encode(), {SECRET_TAIL!r}.encode()
    found = 0
    with open(f"/proc/{{pid}}/maps") as maps, open(f"/proc/{{pid}}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r") or "[v" in line:
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            at = data.find(head)
            while at >= 0:
                found += data[at + len(head):at + len(head) + len(tail)] == tail
                at = data.find(head, at + 1)
    return found

own = scan_memory()
'''
PEEK = SCAN.replace("own = scan_memory()", "parent = scan_memory(os.getppid())")


def scanning_notebook() -> nbformat.NotebookNode:
    """An answer cell that searches its own process's memory, then the grader's, for the
    marker that only a test cell holds."""
    nb = nbformat.v4.new_notebook()
    for label, source in (("scan", SCAN), ("peek", PEEK)):
        answer = nbformat.v4.new_code_cell(source)
        answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": label,
                                       "locked": False, "schema_version": 3}
        nb.cells.append(answer)
    test = nbformat.v4.new_code_cell(f'SECRET = "{SECRET_HEAD}{SECRET_TAIL}"\n'
                                     f'print("own", own)\nassert own == 0\n')
    test.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "test_scan",
                                 "locked": True, "points": 1, "schema_version": 3}
    nb.cells.append(test)
    return nb


@pytest.mark.parametrize("forked", [True, False], ids=["zygote", "fresh interpreter"])
def test_the_sandbox_holds_nothing_of_the_tests_and_cannot_read_the_grader(forked, monkeypatch):
    """The scan reads every mapped page of the sandbox: the hidden marker is not there (the
    sandbox was forked, or started, before the tests were read). Reading the trusted
    process's memory through /proc is refused, and counted as tampering."""
    monkeypatch.setattr(zygote, "ENABLED", forked)
    nb = scanning_notebook()
    verdicts = grade_notebook(nb)
    assert verdicts.error is None
    test_out = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "own 0" in test_out and verdicts.failed == {}, nb.cells[2].outputs
    assert list(verdicts.tampering) == ["peek"]
    assert any(f"/proc/" in r and "outside its own folder" in r
               for r in verdicts.tampering["peek"]), verdicts.tampering


def test_both_ways_of_starting_the_clean_room_give_the_same_outputs(monkeypatch):
    path = ROOT / "solutions" / "ex4_data_validator" / "data_validator.ipynb"
    outputs = {}
    for forked in (True, False):
        monkeypatch.setattr(zygote, "ENABLED", forked)
        nb = nbformat.read(path, as_version=4)
        verdicts = grade_notebook(nb)
        assert verdicts.error is None and verdicts.failed == {} and verdicts.tampering == {}
        outputs[forked] = [json.dumps(c.get("outputs", []), sort_keys=True)
                           for c in nb.cells if c.cell_type == "code"]
    assert outputs[True] == outputs[False]


def test_a_child_killed_before_it_has_its_own_session_is_not_waited_for_forever():
    """A sandbox closed right after its fork may kill it before it ran `setsid`: its pid then
    names no process group, and a kill of the group alone left `close` waiting (CI hung 200 s
    on a syntax-error answer, whose sandbox is closed without a request)."""
    import subprocess

    from lesson.course.grading.sandbox import Sandbox

    child = subprocess.Popen(["sleep", "60"])           # in this test's group, like a new fork
    with pytest.raises(ProcessLookupError):
        os.killpg(child.pid, 0)
    import threading

    box = Sandbox()
    box.proc = child
    closing = threading.Thread(target=box.close, daemon=True)
    closing.start()
    closing.join(timeout=10)
    if closing.is_alive():
        child.kill()                  # lets the stuck close() return, and this test fail
        closing.join()
        pytest.fail("Sandbox.close() still waited for its child 10 s after killing it")
    assert child.returncode == -signal.SIGKILL and box.proc is None
