"""A class graded by `nndebug grade` three ways, one after another on the same submissions:
a local Dask cluster of 1 worker, of 2 workers, and two hosts (network namespaces of this
machine, one `dask worker` each, the scheduler and `nndebug grade` in a third). Prints wall
time and throughput for each, and checks that all three wrote the same grades.

    python benchmarks/bench_class_grading.py --students 300
    python benchmarks/bench_class_grading.py --students 25 --plain   # and serial nbgrader

The class (`simulated.class_of`) hands in ex1 or ex5, one notebook each, in MIX's proportions:
mostly right, honest alternatives, wrong answers, syntax and indentation errors, endless
loops, tampering, a notebook that is not JSON. Limits are the course's (nbgrader_config.py),
the budget the default (measured from the solutions, in every fresh gradebook). The hosts
need root (`ip netns`); without it that row is skipped with the reason. `--plain` adds plain
serial `nbgrader autograde` with nbgrader's own Execute (the student's kernel) for the ratio
the clean room's cost was first measured by.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lesson.course.grading import gradebook as gbk  # noqa: E402
from lesson.course.grading.simulated import KERNEL_EXECUTE, class_of  # noqa: E402
from lesson.course.learner.classroom import copy_course, generate_release, nbgrader, submit  # noqa: E402

BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
           OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def grade(root: Path, *args: str, netns: str | None = None) -> tuple[float, str]:
    """`nndebug grade ARGS` in `root`; (wall seconds, its report's last lines)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    start = time.perf_counter()
    done = subprocess.run(prefix + [sys.executable, "-c", "import sys; from lesson.course.cli "
                                    "import main; sys.exit(main())", "grade", "--no-progress",
                                    *args], cwd=root, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"nndebug grade {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return wall, done.stdout.strip().splitlines()[-1]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise PermissionError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def two_hosts():
    """A scheduler's namespace joined by a veth pair to each of two hosts' namespaces
    (10.N.1.0/24 and 10.N.2.0/24, N from this process id); yields (scheduler namespace,
    [(host namespace, its address, the scheduler's address on its link)]); removed after."""
    tag = os.getpid() % 100000
    net = 100 + os.getpid() % 100
    sched = f"ndb-s{tag}"
    hosts = [(f"ndb-h{i}-{tag}", f"10.{net}.{i}.2", f"10.{net}.{i}.1") for i in (1, 2)]
    made: list[str] = []
    try:
        for ns in [sched] + [h for h, _, _ in hosts]:
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for i, (ns, address, gateway) in enumerate(hosts, start=1):
            a, b = f"nbs{i}-{tag}", f"nbh{i}-{tag}"
            _ip("link", "add", a, "netns", sched, "type", "veth", "peer", "name", b, "netns", ns)
            _ip("-n", sched, "addr", "add", f"{gateway}/24", "dev", a)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", b)
            _ip("-n", sched, "link", "set", a, "up")
            _ip("-n", ns, "link", "set", b, "up")
        yield sched, hosts
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextmanager
def cluster_on(sched: str, hosts: list[tuple[str, str, str]], logs: Path):
    """`dask scheduler` in `sched` and one single-threaded `dask worker` in each host;
    yields the address the client uses; kills them all after."""
    procs = []
    logs.mkdir(parents=True, exist_ok=True)

    def spawn(name: str, ns: str, *cmd: str) -> None:
        log = (logs / f"{name}.log").open("w")
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, str(BIN / "dask"), *cmd],
                                      stdout=log, stderr=subprocess.STDOUT, env=ENV,
                                      start_new_session=True))

    try:
        spawn("scheduler", sched, "scheduler", "--host", "0.0.0.0", "--port", "8786",
              "--no-dashboard")
        for i, (ns, address, gateway) in enumerate(hosts):
            spawn(f"worker{i}", ns, "worker", f"tcp://{gateway}:8786", "--host", address,
                  "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0")
        wait = ("import sys; from distributed import Client\n"
                "with Client(sys.argv[1], timeout='60s') as c: c.wait_for_workers(2, timeout=180)")
        subprocess.run(["ip", "netns", "exec", sched, sys.executable, "-c", wait,
                        "tcp://127.0.0.1:8786"], env=ENV, check=True, timeout=300)
        yield "tcp://127.0.0.1:8786"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--plain", action="store_true",
                        help="also plain serial nbgrader autograde in the student's kernel")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="nndebug-bench-class-"))
    template = copy_course(ROOT, base / "template")
    generate_release(template)
    for (student, assignment), nb in class_of(args.students, ROOT / "solutions", template,
                                              base / "drafts").items():
        submit(template, student, assignment, nb)
    n = args.students
    print(f"{n} students, one notebook each (ex1 or ex5, mixed answers and faults); "
          f"{os.cpu_count()} cores, load average at the start "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows, grades = [], {}

    def run(name: str, *extra: str, netns: str | None = None) -> None:
        root = base / name.replace(" ", "-")
        shutil.copytree(template, root)
        wall, last = grade(root, *extra, netns=netns)
        rows.append((name, wall, last))
        grades[name] = gbk.scores(gbk.db_url(root, None))
        print(f"{name:<28} {wall:7.1f} s  {n / wall * 60:6.1f} submissions/min  "
              f"{wall / n:5.2f} s each   ({last}; load average after it "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})", flush=True)

    run("local, 1 worker", "--workers", "1")
    run("local, 2 workers", "--workers", "2")
    try:
        with two_hosts() as (sched, hosts), cluster_on(sched, hosts, base / "logs") as address:
            run("2 hosts, 1 worker each", "--scheduler", address, netns=sched)
    except PermissionError as exc:
        print(f"{'2 hosts, 1 worker each':<28} skipped: {exc}")
    same = all(g == grades["local, 1 worker"] for g in grades.values())
    print(f"the same grades in every run: {same}")
    if args.plain:
        plain = base / "plain"
        shutil.copytree(template, plain)
        with (plain / "nbgrader_config.py").open("a") as f:
            f.write(KERNEL_EXECUTE)
        start = time.perf_counter()
        nbgrader(plain, "autograde", "*", "--force", check=False)
        wall = time.perf_counter() - start
        ours = next(w for name, w, _ in rows if name == "local, 2 workers")
        print(f"{'plain nbgrader, serial':<28} {wall:7.1f} s  {n / wall * 60:6.1f} "
              f"submissions/min; local 2 workers / plain = {ours / wall:.2f}")
    (base / "result.json").write_text(json.dumps(rows))
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
