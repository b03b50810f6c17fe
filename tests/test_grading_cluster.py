"""`nndebug grade` on a real Dask cluster, and submissions that go wrong in every way a class
can make them: a sandbox that dies, a memory hog, an answer that kills its own process, a
worker killed mid-grade, and a scheduler and workers in separate network namespaces of this
machine (its own loopback and the namespaces' addresses only)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from lesson.course.grading import gradebook as gbk
from lesson.course.grading.simulated import submissions
from lesson.course.learner.classroom import copy_course, generate_release, submit

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT, NOTEBOOK = "ex5_gradient_check", "gradient_check"
SOLUTION = ROOT / "solutions" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
           OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
#: the namespaces' own subnet (nothing outside this machine is ever addressed)
SCHEDULER_IP, WORKER_IP = "10.213.0.1", "10.213.0.2"


def nndebug(root: Path, *args: str, netns: str | None = None, timeout: float = 600,
            ) -> subprocess.CompletedProcess:
    """`nndebug grade ARGS` in the course folder `root` (inside network namespace `netns`)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(prefix + [sys.executable, "-c", "import sys; from lesson.course.cli "
                                    "import main; sys.exit(main())", "grade", "--no-progress",
                                    *args], cwd=root, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def course(base: Path) -> Path:
    root = copy_course(ROOT, base / "course")
    generate_release(root)
    return root


def hand_in(root: Path, student: str, edits: dict[str, str] | None = None) -> None:
    """`student` hands in the solution of ex5 with some answer cells (by grade_id) rewritten."""
    nb = json.loads(SOLUTION.read_text())
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in (edits or {}):
            cell["source"] = edits[grade_id]
    draft = root.parent / "drafts" / student / f"{NOTEBOOK}.ipynb"
    draft.parent.mkdir(parents=True, exist_ok=True)
    draft.write_text(json.dumps(nb))
    submit(root, student, ASSIGNMENT, draft)


def cells(root: Path, student: str) -> dict[str, float]:
    scores = gbk.cell_scores(gbk.db_url(root, None), student, ASSIGNMENT)
    return {test: score for test, (score, _) in scores.items()}


def report_lines(run: subprocess.CompletedProcess, student: str) -> str:
    return "\n".join(ln for ln in run.stdout.splitlines() if ln.startswith(f"{student}/"))


def graded_count(run: subprocess.CompletedProcess) -> tuple[int, int]:
    found = re.search(r"(\d+) graded, (\d+) could not be graded", run.stdout)
    assert found, run.stdout + run.stderr
    return int(found.group(1)), int(found.group(2))


# -- a Dask cluster of separate processes -------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dask_cluster(logs: Path, scheduler_host: str = "127.0.0.1", worker_host: str = "127.0.0.1",
                 workers: int = 2, scheduler_ns: str | None = None,
                 worker_ns: str | None = None):
    """A `dask scheduler` and `workers` single-threaded `dask worker` processes (no nanny, so a
    killed worker stays dead), each in its own process group; yields (address, worker Popens)
    and kills them all on the way out."""
    port = _free_port() if scheduler_ns is None else 8786
    address = f"tcp://{scheduler_host}:{port}"
    procs: list[subprocess.Popen] = []
    logs.mkdir(parents=True, exist_ok=True)

    def spawn(name: str, ns: str | None, *cmd: str) -> subprocess.Popen:
        prefix = ["ip", "netns", "exec", ns] if ns else []
        log = (logs / f"{name}.log").open("w")
        proc = subprocess.Popen(prefix + [str(BIN / "dask"), *cmd], stdout=log,
                                stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
        procs.append(proc)
        return proc

    try:
        spawn("scheduler", scheduler_ns, "scheduler", "--host", scheduler_host, "--port",
              str(port), "--no-dashboard")
        pool = [spawn(f"worker{i}", worker_ns, "worker", address, "--host", worker_host,
                      "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0",
                      "--death-timeout", "120") for i in range(workers)]
        yield address, pool
    finally:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()


def _logs(folder: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("*.log")))


# -- where the sandbox runs ------------------------------------------------------------------

def test_the_sandbox_works_with_its_venv_inside_the_course_folder_it_may_not_read():
    """`make` puts .venv in the repository, which is the course folder the sandbox is denied:
    the interpreter's own files stay readable there, the course's files do not."""
    from lesson.course.grading.sandbox import Limits, Sandbox

    box = Sandbox(limits=Limits(timeout_s=120), deny=[str(ROOT), str(Path(sys.prefix).parent)])
    try:
        reply = box.request(("cell", "import torch\nx = torch.ones(2)\n", "x", ["x"]))
        assert reply["ok"] and not reply["tampering"], reply
        secret = SOLUTION.as_posix()
        reply = box.request(("cell", f"text = open({secret!r}).read()\n", "peek", ["text"]))
        assert not reply["ok"] and any("solutions" in t for t in reply["tampering"]), reply
    finally:
        box.close()


# -- bad submissions -----------------------------------------------------------------------

#: locate_bad_parameter's cell, three ways of going wrong (numerical_gradient stays honest)
DIES_IN_A_CELL = (  # a read far past an array's end: SIGSEGV while the cell runs
    "crash = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2,), strides=(1 << 44,))\n"
    "print(crash.sum())\n")
HOGS_MEMORY = ("def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
               "    hog = [bytearray(1 << 20) for _ in range(100_000)]\n"
               "    return len(hog)\n")
KILLS_ITSELF = ("import os\n\n"
                "def locate_bad_parameter(model, loss_fn, x, y, tol=1e-6):\n"
                "    os.kill(os.getpid(), 9)\n")


@pytest.mark.slow
def test_dying_hogging_and_self_killing_answers_are_reported_and_the_rest_graded(tmp_path):
    root = course(tmp_path)
    hand_in(root, "model")
    hand_in(root, "dier", {"locate_bad_parameter": DIES_IN_A_CELL})
    hand_in(root, "hog", {"locate_bad_parameter": HOGS_MEMORY})
    hand_in(root, "killer", {"locate_bad_parameter": KILLS_ITSELF})
    run = nndebug(root, "--workers", "2", "--memory", "2048")
    assert run.returncode == 0, run.stdout + run.stderr         # each one was graded
    assert graded_count(run) == (4, 0)
    assert "the sandbox died of SIGSEGV" in report_lines(run, "dier"), run.stdout
    assert re.search(r"ran out of memory \(the sandbox's limit is 2048 MB\)",
                     report_lines(run, "hog")), run.stdout
    assert "TAMPERING" in report_lines(run, "killer") and "os.kill" in report_lines(run, "killer")
    assert cells(root, "model") == {"test_numerical_gradient": 3, "test_locate": 4,
                                    "test_reference_and_fix": 2}
    for student in ("dier", "hog", "killer"):   # the honest numerical_gradient keeps its points
        assert cells(root, student) == {"test_numerical_gradient": 3, "test_locate": 0,
                                        "test_reference_and_fix": 0}, (student, run.stdout)


@pytest.mark.slow
def test_a_worker_killed_mid_grade_is_rescheduled_and_nothing_is_lost_or_graded_twice(tmp_path):
    from distributed import Client

    root = course(tmp_path)
    for student in ("model", "early"):
        hand_in(root, student)
    solution = json.loads(SOLUTION.read_text())["cells"]
    source = next("".join(c["source"]) for c in solution
                  if c["metadata"].get("nbgrader", {}).get("grade_id") == "numerical_gradient")
    hand_in(root, "sleeper", {"numerical_gradient": source + "\n\nimport time\ntime.sleep(15)\n"})
    with dask_cluster(tmp_path / "logs") as (address, pool), \
            Client(address, timeout="60s") as client:
        client.wait_for_workers(2, timeout=120)
        pids = client.run(os.getpid)                       # worker address -> pid
        grading = subprocess.Popen(
            [sys.executable, "-c", "import sys; from lesson.course.cli import main; "
             "sys.exit(main())", "grade", "--no-progress", "--scheduler", address],
            cwd=root, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim, deadline = None, time.monotonic() + 300
        while victim is None and time.monotonic() < deadline and grading.poll() is None:
            for worker, keys in client.processing().items():
                if any(str(k).startswith("grade-sleeper-") for k in keys):
                    victim = worker
            time.sleep(0.2)
        assert victim is not None, _logs(tmp_path / "logs")
        time.sleep(5)                                      # well inside its 15 s sleep
        assert any(str(k).startswith("grade-sleeper-") for k in client.processing()[victim])
        os.killpg(pids[victim], signal.SIGKILL)            # the worker and its clean room
        moved, deadline = None, time.monotonic() + 120
        while moved is None and time.monotonic() < deadline:
            for worker, keys in client.processing().items():
                if worker != victim and any(str(k).startswith("grade-sleeper-") for k in keys):
                    moved = worker
            time.sleep(0.2)
        out, err = grading.communicate(timeout=600)
    assert moved is not None and moved != victim, out + err      # rescheduled by Dask
    run = subprocess.CompletedProcess(grading.args, grading.returncode, out, err)
    assert run.returncode == 0, out + err + _logs(tmp_path / "logs")
    assert graded_count(run) == (3, 0)                   # nothing lost, nothing counted twice
    table = [ln.split()[0] for ln in out.splitlines() if ln.split()[:1] in (["model"], ["early"],
                                                                          ["sleeper"])]
    assert sorted(table) == ["early", "model", "sleeper"]
    url = gbk.db_url(root, None)
    assert gbk.scores(url) == {(s, ASSIGNMENT): (9.0, 9.0) for s in ("model", "early", "sleeper")}
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:                           # one row per test, per submission
        rows = [(g.student.id, g.name) for sub in gb.find_assignment(ASSIGNMENT).submissions
                for nb in sub.notebooks for g in nb.grades]
    assert len(rows) == len(set(rows)) == 3 * 3
    autograded = sorted(p.relative_to(root / "autograded").as_posix()
                        for p in (root / "autograded").rglob("*.ipynb"))
    assert autograded == [f"{s}/{ASSIGNMENT}/{NOTEBOOK}.ipynb"
                          for s in ("early", "model", "sleeper")]


# -- a scheduler and its workers on separate (virtual) hosts -------------------------------

def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@contextmanager
def two_hosts():
    """Two network namespaces joined by a veth pair: the scheduler's (10.213.0.1/24) and the
    workers' (10.213.0.2/24), each with its loopback up; removed again even on failure."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` (iproute2) on this machine: the multi-host test needs ip netns")
    tag = f"{os.getpid() % 100000}"
    hosts = (f"nndebug-sched-{tag}", f"nndebug-work-{tag}")
    made: list[str] = []
    try:
        for ns in hosts:
            added = _ip("netns", "add", ns)
            if added.returncode != 0:
                pytest.skip(f"`ip netns add` is not permitted here (needs root / CAP_SYS_ADMIN): "
                            f"{added.stderr.strip()}")
            made.append(ns)
        steps = [("link", "add", f"nds{tag}", "netns", hosts[0], "type", "veth", "peer", "name",
                  f"ndw{tag}", "netns", hosts[1]),
                 ("-n", hosts[0], "addr", "add", f"{SCHEDULER_IP}/24", "dev", f"nds{tag}"),
                 ("-n", hosts[1], "addr", "add", f"{WORKER_IP}/24", "dev", f"ndw{tag}")]
        for ns, dev in ((hosts[0], f"nds{tag}"), (hosts[1], f"ndw{tag}")):
            steps += [("-n", ns, "link", "set", "lo", "up"), ("-n", ns, "link", "set", dev, "up")]
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield hosts
    finally:
        for ns in made:                                   # the veth pair goes with them
            _ip("netns", "del", ns)


WORKERS_SEEN = """
import json, sys
from distributed import Client
with Client(sys.argv[1], timeout="60s") as c:
    c.wait_for_workers(2, timeout=120)
    print(json.dumps(sorted(c.scheduler_info()["workers"])))
"""


@pytest.mark.slow
def test_a_class_graded_by_workers_on_another_host(tmp_path):
    with two_hosts() as (sched_ns, work_ns):
        root = course(tmp_path)
        for (student, assignment), nb in submissions(ROOT / "solutions", root,
                                                     tmp_path / "drafts").items():
            if assignment == ASSIGNMENT:
                submit(root, student, assignment, nb)
        alone = tmp_path / "local"
        shutil.copytree(root, alone)                      # the same class, graded locally
        with dask_cluster(tmp_path / "logs", SCHEDULER_IP, WORKER_IP, scheduler_ns=sched_ns,
                          worker_ns=work_ns) as (address, _):
            seen = subprocess.run(["ip", "netns", "exec", sched_ns, sys.executable, "-c",
                                   WORKERS_SEEN, address], env=ENV, capture_output=True,
                                  text=True, timeout=300)
            assert seen.returncode == 0, seen.stderr + _logs(tmp_path / "logs")
            workers = json.loads(seen.stdout)
            assert len(workers) == 2 and all(w.startswith(f"tcp://{WORKER_IP}:") for w in workers)
            run = nndebug(root, "--scheduler", address, netns=sched_ns)
        assert run.returncode == 0, run.stdout + run.stderr + _logs(tmp_path / "logs")
        local = nndebug(alone, "--workers", "2")
        assert local.returncode == 0, local.stdout + local.stderr
    remote_scores = gbk.scores(gbk.db_url(root, None))
    assert len(remote_scores) == 4 and remote_scores[("model", ASSIGNMENT)] == (9.0, 9.0)
    assert remote_scores == gbk.scores(gbk.db_url(alone, None))
    for student, _ in remote_scores:
        assert gbk.cell_scores(gbk.db_url(root, None), student, ASSIGNMENT) == \
            gbk.cell_scores(gbk.db_url(alone, None), student, ASSIGNMENT)
    assert "tampering caught" in run.stdout and "reader/" in run.stdout
