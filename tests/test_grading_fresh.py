"""`nndebug grade` on a course of its own, not the simulated class of tests/test_grading.py
(whose shared fixture keeps that module on one xdist worker): a bad submission reported and
the rest graded, and a PostgreSQL gradebook. Here each test is scheduled on its own, so they
run beside that module's grading instead of after it."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lesson.course.grading import gradebook as gbk
from lesson.course.grading.simulated import submissions
from lesson.course.learner.classroom import copy_course, generate_release, submit
from test_grading import _cells, nndebug

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_bad_submission_is_reported_and_the_rest_graded(tmp_path):
    root = copy_course(ROOT, tmp_path / "course")
    generate_release(root)
    submit(root, "model", "ex5_gradient_check",
           ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb")
    broken = root / "submitted" / "garbled" / "ex5_gradient_check" / "gradient_check.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text("{this is not json")
    (root / "submitted" / "absent" / "ex5_gradient_check").mkdir(parents=True)
    looper = json.loads((ROOT / "solutions" / "ex5_gradient_check" / "gradient_check.ipynb").read_text())
    for cell in looper["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "numerical_gradient":
            cell["source"] = ("def numerical_gradient(loss_at, array, eps=1e-5):\n"
                              "    while True:\n        pass\n")
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "locate_bad_parameter":
            cell["source"] = ("def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
                              "    hog = [bytearray(1 << 20) for _ in range(100_000)]\n"
                              "    return len(hog)\n")
    target = root / "submitted" / "looper" / "ex5_gradient_check" / "gradient_check.ipynb"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(looper))
    run = nndebug(root, "--workers", "2", "--timeout", "5", "--memory", "2048")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "garbled/ex5_gradient_check: gradient_check.ipynb is not a readable notebook" in run.stdout
    assert "absent/ex5_gradient_check: gradient_check.ipynb was not submitted" in run.stdout
    assert "looper/ex5_gradient_check" in run.stdout and "longer than 5 s" in run.stdout
    assert ("looper/ex5_gradient_check: test_locate: locate_bad_parameter ran out of memory "
            "(the sandbox's limit is 2048 MB)") in run.stdout      # the hog, at --memory
    table = gbk.scores(gbk.db_url(root, None))
    assert table[("model", "ex5_gradient_check")] == (9.0, 9.0)
    assert table[("absent", "ex5_gradient_check")][0] == 0
    assert table[("garbled", "ex5_gradient_check")][0] is None          # ungraded, not zero
    looper_cells = _cells(gbk.db_url(root, None), "looper", "ex5_gradient_check")
    assert looper_cells["test_numerical_gradient"][0] == 0 and looper_cells["test_locate"][0] == 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, else where Debian's postgresql-NN puts them
    (not on PATH on a fresh machine), newest version first."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return versions[-1].parent if versions else None


@pytest.fixture
def postgres(tmp_path_factory):
    """A throwaway PostgreSQL server from the machine's binaries, run as `postgres` on
    127.0.0.1; yields its URL and stops it."""
    binaries = _postgres_bin()
    if binaries is None or not shutil.which("runuser"):
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl: apt-get install postgresql-15) or "
                    "runuser not on this machine")
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="nndebug-pg-", dir="/tmp"))
    shutil.chown(folder, "postgres")
    port = _free_port()
    pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(pg + [str(binaries / "initdb"), "-D", str(folder / "data"), "-A", "trust",
                         "-U", "postgres"],
                   check=True, capture_output=True, cwd=folder)
    subprocess.run(pg + [str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-w",
                         "-l", str(folder / "log"),
                         "-o", f"-h 127.0.0.1 -p {port} -k {folder}", "start"],
                   check=True, capture_output=True, cwd=folder)
    try:
        subprocess.run(pg + [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                             "-U", "postgres",
                             "course"], check=True, capture_output=True, cwd=folder)
        yield f"postgresql://postgres@127.0.0.1:{port}/course"
    finally:
        subprocess.run(pg + [str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-m", "fast",
                             "stop"],
                       capture_output=True, cwd=folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_postgresql_gradebook_holds_the_same_grades(tmp_path, postgres):
    root = copy_course(ROOT, tmp_path / "course")
    generate_release(root)
    for (student, assignment), nb in submissions(ROOT / "solutions", root,
                                                 tmp_path / "drafts").items():
        if assignment == "ex5_gradient_check":
            submit(root, student, assignment, nb)
    sqlite = nndebug(root, "--workers", "2")
    assert sqlite.returncode == 0, sqlite.stdout + sqlite.stderr
    pg = nndebug(root, "--workers", "2", "--db", postgres)      # no --force: a new gradebook
    assert pg.returncode == 0, pg.stdout + pg.stderr
    assert "skipped" not in pg.stdout and "4 graded, 0 could not" in pg.stdout, pg.stdout
    in_sqlite = gbk.scores(gbk.db_url(root, None))
    assert len(in_sqlite) == 4 and gbk.scores(gbk.db_url(root, postgres)) == in_sqlite
    again = nndebug(root, "--workers", "1", "--db", postgres)   # and is incremental there
    assert again.returncode == 0 and "4 unchanged submissions skipped" in again.stdout
