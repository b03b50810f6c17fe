"""The isolated child that runs a student's answers, and the grader's handle on it.

The child is a fresh interpreter (`python -I`), or a fork of a pristine one (a zygote's child
that has read nothing of the notebook, `zygote.py`), in its own session and temporary directory,
with limits on memory, CPU time and file size, and a wall-clock deadline per request enforced
from outside (the whole process group is killed). An audit hook, installed before any student
code runs and impossible to remove from Python, refuses opening files outside the child's
directory and the installed packages (so `solutions/`, the gradebook and other submissions
stay unreadable), starting processes, signals and sockets, and writing attributes of the
course's classes; after every request the child also compares the course's modules with a
snapshot taken before. Anything refused is reported back as tampering.

The grader sends requests with cloudpickle (the child may run whatever the grader gives it)
and reads replies with `wire.loads`, which rebuilds plain data only.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .child import answer_ref
from .frames import SandboxDied, TimedOut, frame, read_frame
from .processes import kill_session

#: default limits per submission: wall time of one request, total memory and CPU time
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 3072
DEFAULT_CPU_S = 900
#: what the course's notebooks allocate beyond a fresh sandbox's own address space: the
#: solutions peak about 310 MB above it (the clinics and ex3, read from VmPeak), so 512
COURSE_WORKING_MB = 512


def memory_floor_mb(mapped_mb: float) -> int:
    """The least memory limit the course can be graded under, for a sandbox that starts
    with `mapped_mb` of address space (torch alone maps hundreds of MB): RLIMIT_AS counts
    it all, so a limit below it stops every answer, honest or not. Rounded up to 64 MB."""
    return int(-(-(mapped_mb + COURSE_WORKING_MB) // 64) * 64)


class MemoryTooLow(ValueError):
    """A memory limit below what the course needs."""

    def __init__(self, memory_mb: float, mapped_mb: float):
        self.floor_mb = memory_floor_mb(mapped_mb)
        super().__init__(f"a memory limit of {memory_mb:g} MB is below what the course needs: "
                         f"at least {self.floor_mb} MB (a sandbox starts with {mapped_mb:.0f} MB "
                         f"mapped by torch, NumPy and matplotlib; the course's answers need "
                         f"{COURSE_WORKING_MB} MB more)")


@dataclass
class Limits:
    """What one student's sandbox may use."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    cpu_s: int = DEFAULT_CPU_S
    #: wall seconds the student's code may take over the whole notebook (None: no budget)
    budget_s: float | None = None


def _package_dirs() -> list[str]:
    import broken_models
    import lesson

    return [str(Path(lesson.__file__).resolve().parent),
            str(Path(broken_models.__file__).resolve().parent)]


def _code_roots() -> list[str]:
    """Where the child imports `lesson` and `broken_models` from (their parent folders)."""
    return list(dict.fromkeys(str(Path(d).parent) for d in _package_dirs()))


def _set_limits(limits: Limits) -> None:
    """In the child, before any of its own code: memory, CPU time, file size, no core."""
    import resource

    memory = int(limits.memory_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (int(limits.cpu_s), int(limits.cpu_s) + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def reseed() -> None:
    """A fork shares its parent's random state; a fresh interpreter would draw its own."""
    import random

    import numpy

    random.seed()
    numpy.random.seed()
    tempfile.tempdir = None


class _Forked:
    """A forked child, with the part of `subprocess.Popen` the sandbox uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"sandbox {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


def _fork_child(config: dict, env: dict[str, str], limits: Limits, keep: tuple[int, int]
                ) -> _Forked:
    """What `Popen(start_new_session=True, pass_fds=keep, preexec_fn=limits)` would start,
    without a new interpreter: the fork keeps this pristine process's imports."""
    pid = os.fork()
    if pid:
        return _Forked(pid)
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        top = max(keep) + 1
        os.closerange(3, min(keep))
        os.closerange(min(keep) + 1, max(keep))
        os.closerange(top, os.sysconf("SC_OPEN_MAX"))
        os.chdir(config["workdir"])
        os.environ.clear()
        os.environ.update(env)
        sys.dont_write_bytecode = True            # what `-B` gives the new interpreter
        reseed()
        _set_limits(limits)
        from .child import main

        main(config)
    finally:
        os._exit(1)


@dataclass
class Sandbox:
    """One student's child process; restarted (and its answers replayed) after a death."""

    limits: Limits = field(default_factory=Limits)
    deny: list[str] = field(default_factory=list)   # folders the child may never read
    proc: subprocess.Popen | None = None
    workdir: Path | None = None
    _replay: list[bytes] = field(default_factory=list)
    _fds: tuple[int, int] | None = None
    _hello: bool = False
    #: the top-level statement of the current cell that was last seen starting (see child)
    progress: int | None = None
    #: wall seconds the student's code has taken: requests and the replays after a restart
    #: (a new interpreter's start-up is the grader's cost, kept in `booting`)
    spent: float = 0.0
    booting: float = 0.0

    def start(self, fork: bool = False) -> None:
        """Start the child: a new `python -I`, or with `fork` a fork of this process, which
        must then be pristine (a zygote's fresh child that has read nothing of the notebook)."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="nndebug-sandbox-"))
            os.chmod(self.workdir, 0o700)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.workdir), "TMPDIR": str(self.workdir),
               "MPLCONFIGDIR": str(self.workdir / ".mpl"), "MPLBACKEND": "Agg",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        config = {"fd_in": to_child_r, "fd_out": from_child_w, "workdir": str(self.workdir),
                  "code_roots": _code_roots(), "packages": _package_dirs(),
                  "deny": [str(Path(d).resolve()) for d in self.deny]}
        matplotlib_home = os.environ.get("MPLCONFIGDIR")
        if fork and matplotlib_home:       # the zygote's font cache, which its forks read
            config["packages"] = config["packages"] + [matplotlib_home]
        boot = ("import sys; sys.path[:0] = %r; "
                "from lesson.course.grading import child; child.main(%r)"
                % (config["code_roots"], config))
        limits = self.limits
        if fork:
            self.proc = _fork_child(config, env, self.limits, keep=(to_child_r, from_child_w))
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", boot], cwd=self.workdir, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(to_child_r, from_child_w), preexec_fn=lambda: _set_limits(limits),
                start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._fds = (to_child_w, from_child_r)
        self._hello = False

    def _ready(self, left: float) -> float:
        """Wait for the child's hello (it imports torch meanwhile; counted in `booting`), then
        replay the answers a previous child had before it died, within `left` seconds. The
        moment the replays must end by."""
        if self._hello:
            return time.monotonic() + left
        begun = time.monotonic()
        self._request_raw(b"", deadline=begun + 180)
        self.booting += time.monotonic() - begun
        self._hello = True
        deadline = time.monotonic() + left
        for message in self._replay:       # each ran before: a death here ends the request
            self._request_raw(message, min(deadline, time.monotonic() + self.limits.timeout_s))
        return deadline

    def _request_raw(self, payload: bytes, deadline: float, track: bool = False) -> Any:
        """One request and its reply; `track` keeps the cell's progress frames."""
        from . import wire

        write_fd, read_fd = self._fds
        if payload:
            try:
                os.write(write_fd, frame(payload))
            except BrokenPipeError:
                note = self._death_note()
                self.kill()
                raise SandboxDied(note)
        while True:
            try:
                reply = wire.loads(read_frame(read_fd, deadline))
            except TimedOut:
                self.kill()
                raise
            except SandboxDied:
                note = self._death_note()         # before kill(), which forgets the process
                self.kill()
                raise SandboxDied(note)
            if isinstance(reply, dict) and set(reply) == {"progress"}:
                if track:
                    self.progress = reply["progress"]
                continue
            return reply

    def _death_note(self) -> str:
        """Why the child went away: its signal or exit status (its channel closes a moment
        before it can be reaped, so wait a little for it)."""
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
        if code is None:
            return "the sandbox stopped answering"
        if code < 0:
            name = signal.Signals(-code).name
            why = {"SIGKILL": " (killed: a memory or time limit)", "SIGXCPU": " (CPU time limit)",
                   "SIGSEGV": " (crashed)"}.get(name, "")
            return f"the sandbox died of {name}{why}"
        return f"the sandbox exited with status {code}"

    def request(self, message: tuple, replay: bool = False, timeout: float | None = None,
                budget: float | None = None) -> Any:
        """Send one request; the reply is plain data. `replay` keeps it for restarts.
        `timeout` (at most the limit's) bounds the request itself; `budget` bounds it with
        the restart and replay it may need first (TimedOut past either)."""
        start, booted = time.monotonic(), self.booting
        left = budget if budget is not None else float("inf")
        wait = self.limits.timeout_s if timeout is None else min(timeout, self.limits.timeout_s)
        self.progress = None
        try:
            if left <= 0:
                raise TimedOut("no time left")
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            end = self._ready(left)
            payload = dumps_for_child(message)
            reply = self._request_raw(payload, min(end, time.monotonic() + wait), track=True)
        finally:
            self.spent += time.monotonic() - start - (self.booting - booted)
        if replay:
            self._replay.append(payload)
        return reply

    def kill(self) -> None:
        """Kill the child and all it started, and forget it."""
        if self.proc is not None and self.proc.poll() is None:
            kill_session(self.proc.pid)
            self.proc.wait()
        if self._fds:
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds = None
        self.proc = None

    def close(self) -> None:
        import shutil

        self.kill()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def dumps_for_child(message: Any) -> bytes:
    """cloudpickle, with the grader's stand-ins for student functions sent by name."""
    import io

    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            name = getattr(obj, "__nndebug_answer__", None) if callable(obj) else None
            if isinstance(name, str):
                return answer_ref, (name,)
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer, protocol=5).dump(message)
    return buffer.getvalue()
