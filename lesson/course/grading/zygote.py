"""A warm interpreter that forks the clean room's processes, so no notebook pays for torch.

Every notebook is graded in two fresh processes (`cleanroom`, `sandbox`); started as new
interpreters, each spends about 1.5 CPU-seconds importing torch, NumPy and matplotlib before
its first line, which was a third of the cost of grading a class. The zygote is one
`python -I` per grading process (a Dask worker, or the `nbgrader autograde` run), in the
clean environment the trusted process always had: it imports those libraries and the course,
then only waits. It never runs a notebook, a test or a line of a student's, so each process
forked from it starts exactly as a fresh interpreter would after the same imports: nothing a
notebook touched is in it. The trusted process forks the student's sandbox from that same
pristine state before it reads the notebook, so the tests are never in the sandbox's memory.

Protocol (length-prefixed JSON frames, `frames.py`): `{"id", "target": "module:function",
"kwargs", "cwd", "log"}` -> `{"id", "pid"}` at the fork, then `{"id", "status"}` (the exit
code; minus the signal number when killed) when the child ends. The child runs in its own
session, so a deadline kills its whole process group.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .frames import SandboxDied, TimedOut, frame, read_frame
from .processes import kill_session
from .sandbox import _code_roots, reseed

#: imported once by the zygote (what every trusted process and sandbox imports anyway)
PRELOAD = ("numpy", "torch", "cloudpickle", "matplotlib.pyplot", "lesson", "broken_models",
           "lesson.debugger", "lesson.checks", "lesson.data", "lesson.course.grading.cleanroom",
           "lesson.course.grading.child")
STARTUP_S = 180.0
#: how long the zygote may take to answer a fork, or to report a child killed past its time
REPLY_S = 30.0


class ZygoteGone(Exception):
    """The zygote could not start or stopped answering; the caller starts a fresh process."""


def clean_env() -> dict[str, str]:
    """The environment of the trusted process: the caller's, less PYTHON* (as `-I` ignores
    them), with single-threaded BLAS and matplotlib's Agg backend."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    return env


def mapped_mb() -> float:
    """This process's address space in MB (VmSize, what RLIMIT_AS counts), 0 where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- inside the zygote -----------------------------------------------------------------------

def serve(fd_in: int, fd_out: int) -> None:
    """The zygote's loop: import, say ready, then fork one child per request and report how
    each ended. Single-threaded (a fork from a threaded process may inherit held locks)."""
    import importlib

    import matplotlib
    matplotlib.use("Agg")
    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    torch.set_num_threads(1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: dict[int, Any] = {}

    def send(message: dict) -> None:
        os.write(fd_out, frame(json.dumps(message).encode()))

    send({"ready": True, "pid": os.getpid(), "mapped_mb": mapped_mb()})
    import select

    while True:
        ready = select.select([fd_in, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                send({"id": children.pop(pid), "status": os.waitstatus_to_exitcode(status)})
        if fd_in in ready:
            try:
                request = json.loads(read_frame(fd_in))
            except (SandboxDied, ValueError):
                os._exit(0)            # the grading process went away
            pid = os.fork()
            if pid == 0:
                for fd in (fd_in, fd_out, wake_r, wake_w):
                    os.close(fd)
                _child(request)
            children[pid] = request["id"]
            send({"id": request["id"], "pid": pid})


def _child(request: dict) -> None:
    """In the forked child: become a fresh process of its own, run the target, exit."""
    import importlib
    import traceback

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(request["cwd"])
        reseed()
        module, _, function = request["target"].partition(":")
        getattr(importlib.import_module(module), function)(**request["kwargs"])
        code = 0
    except SystemExit as exc:             # as an interpreter ends: None is 0, a message is 1
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


# -- the grading process's side ------------------------------------------------------------

class Zygote:
    """A handle on one zygote process; one request at a time (the pool hands it out)."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="nndebug-zygote-"))
        env = clean_env()
        env["MPLCONFIGDIR"] = str(self.home)   # matplotlib's font cache, built once per zygote
        to_r, self._to = os.pipe()
        self._from, from_w = os.pipe()
        boot = ("import sys; sys.path[:0] = %r; from lesson.course.grading import zygote; "
                "zygote.serve(%d, %d)" % (_code_roots(), to_r, from_w))
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", boot], env=env, cwd=self.home,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=(to_r, from_w),
                                     start_new_session=True)
        os.close(to_r)
        os.close(from_w)
        self._ready = False
        self._next = 0
        self.mapped_mb = 0.0        # the zygote's address space once it has imported all

    def ready(self) -> None:
        """Wait until the zygote has imported everything (ZygoteGone if it cannot)."""
        if self._ready:
            return
        try:
            hello = self._read(time.monotonic() + STARTUP_S)
        except TimedOut:
            self.close()
            raise ZygoteGone("the zygote did not start in time") from None
        if hello.get("ready") is not True:
            self.close()
            raise ZygoteGone(f"the zygote said {hello} where it says it is ready")
        self.mapped_mb = float(hello.get("mapped_mb", 0.0))
        self._ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, deadline: float) -> dict:
        try:
            return json.loads(read_frame(self._from, deadline))
        except TimedOut:
            raise
        except (SandboxDied, OSError, ValueError) as exc:
            self.close()
            raise ZygoteGone(f"the zygote stopped answering ({exc})") from None

    def _reply(self, key: str, deadline: float) -> Any:
        """`key` of the zygote's answer to the current request; ZygoteGone when the answer
        belongs to another request (the two ends are out of step: no later answer can be
        trusted). TimedOut past `deadline`."""
        message = self._read(deadline)
        if message.get("id") != self._next or key not in message:
            self.close()
            raise ZygoteGone(f"the zygote answered out of step: {message}")
        return message[key]

    def run(self, target: str, kwargs: dict, *, cwd: Path, log: Path, timeout: float
            ) -> int | None:
        """Fork a child that runs `target(**kwargs)` in `cwd` (stdout and stderr to `log`);
        its exit code, or None past `timeout` seconds (its process group is then killed)."""
        self.ready()
        self._next += 1
        request = {"id": self._next, "target": target, "kwargs": kwargs, "cwd": str(cwd),
                   "log": str(log)}
        try:
            os.write(self._to, frame(json.dumps(request).encode()))
        except OSError as exc:
            self.close()
            raise ZygoteGone(f"the zygote is gone ({exc})") from None
        try:
            pid = self._reply("pid", time.monotonic() + REPLY_S)
        except TimedOut:
            self.close()
            raise ZygoteGone("the zygote did not fork in time") from None
        try:
            return self._reply("status", time.monotonic() + timeout)
        except TimedOut:
            kill_session(pid)
        try:
            self._reply("status", time.monotonic() + REPLY_S)
        except TimedOut:
            self.close()            # its answer would come to the next request: none is made
        return None

    def close(self) -> None:
        import shutil

        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to = self._from = -1
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


_POOL: list[Zygote] = []
_LOCK = threading.Lock()
ENABLED = os.name == "posix" and hasattr(os, "fork")


@contextmanager
def zygote() -> Iterator[Zygote]:
    """A warm zygote of this process's pool (started if none is free), returned after use."""
    with _LOCK:
        z = _POOL.pop() if _POOL else None
    if z is None or not z.alive():
        z = Zygote()
    try:
        yield z
    finally:
        if z.alive():
            with _LOCK:
                _POOL.append(z)


def prewarm() -> float:
    """Start a zygote now, so it has imported torch by the time the first notebook comes
    (`nndebug grade` calls this on every Dask worker); its address space in MB, which every
    sandbox forked from it starts with (0 where there is no zygote)."""
    if not ENABLED:
        return 0.0
    with zygote() as z:
        z.ready()
        return z.mapped_mb


@atexit.register
def _close_all() -> None:
    with _LOCK:
        while _POOL:
            _POOL.pop().close()
