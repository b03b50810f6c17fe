"""The sandbox's own parts (`lesson.course.grading.sandbox`), each tested on processes and pipes
made in the test, without a student's notebook: the limits a child runs under, a forked child
set up as a fresh session with nothing of the grader's open, waiting for a child with a
deadline, why a child died, a request's time and budget, progress frames, and the handle's
clean-up. The sandboxed answers themselves are tests/test_grading_answers.py's and
test_grading_zygote.py's."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from lesson.course.grading import child, sandbox, wire
from lesson.course.grading.frames import TimedOut, frame
from lesson.course.grading.sandbox import (COURSE_WORKING_MB, Limits, MemoryTooLow, Sandbox,
                                           _fork_child, _Forked, memory_floor_mb)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")


def test_the_documented_default_limits():
    """README's "Limits": 60 s a call, 3072 MB of address space; 900 s of CPU a sandbox."""
    limits = Limits()
    assert (limits.timeout_s, limits.memory_mb, limits.cpu_s, limits.budget_s) == (
        60.0, 3072, 900, None)
    assert child.MAX_OUTPUT == 20_000


def test_the_memory_floor_is_the_mapped_space_and_the_courses_needs_rounded_up_to_64_mb():
    assert COURSE_WORKING_MB == 512
    assert memory_floor_mb(0) == 512                      # already a multiple of 64
    assert memory_floor_mb(1) == 576
    assert memory_floor_mb(64) == 576
    assert memory_floor_mb(64.5) == 640
    assert memory_floor_mb(700.2) == 1216
    assert isinstance(memory_floor_mb(700.2), int)
    err = MemoryTooLow(600, 700.2)
    assert err.floor_mb == 1216 and "at least 1216 MB" in str(err) and "600 MB" in str(err)


def _limits_in_child(limits: Limits) -> dict:
    """The rlimits a child gets from _set_limits (read in a child of its own)."""
    code = ("import json, resource, sys\n"
            "from lesson.course.grading.sandbox import Limits, _set_limits\n"
            f"_set_limits(Limits(memory_mb={limits.memory_mb}, cpu_s={limits.cpu_s}))\n"
            "print(json.dumps({n: resource.getrlimit(getattr(resource, 'RLIMIT_' + n))"
            " for n in ('AS', 'CPU', 'FSIZE', 'CORE')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return json.loads(out.stdout)


def test_a_child_runs_under_its_memory_cpu_and_file_size_limits_and_leaves_no_core():
    got = _limits_in_child(Limits(memory_mb=2048, cpu_s=100))
    assert got == {"AS": [2048 << 20, 2048 << 20], "CPU": [100, 105],
                   "FSIZE": [256 << 20, 256 << 20], "CORE": [0, 0]}


# -- a forked child -------------------------------------------------------------------------------
def _fork(code: str) -> _Forked:
    pid = os.fork()
    if pid == 0:
        try:
            exec(code, {"os": os, "time": time, "signal": signal})
        finally:
            os._exit(0)
    return _Forked(pid)


def test_a_forked_child_is_polled_waited_for_and_its_status_kept():
    quick = _fork("os._exit(3)")
    assert quick.wait(timeout=10) == 3 and quick.poll() == 3 and quick.returncode == 3
    slow = _fork("time.sleep(30)")
    assert slow.poll() is None
    begun = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        slow.wait(timeout=0.2)
    assert 0.2 <= time.monotonic() - begun < 5
    os.kill(slow.pid, signal.SIGKILL)
    assert slow.wait() == -signal.SIGKILL


def test_a_forked_sandbox_child_is_a_new_session_with_nothing_of_the_graders_open(tmp_path,
                                                                                  monkeypatch):
    """What the zygote's forks start from: stdio on /dev/null, only the two channel ends
    open, its own session, the sandbox's folder, environment and limits; and it never
    returns into the grader's code (exit status 1 after main)."""
    stray = os.open(os.devnull, os.O_RDONLY)               # an fd of the grader's
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def main(config):                                      # the child's main, replaced
        import resource
        fds = []
        for fd in range(1024):
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:
                pass
        report = {"sid": os.getsid(0) == os.getpid(), "cwd": os.getcwd(),
                  "env": dict(os.environ), "fds": fds,
                  "stdio": [os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)],
                  "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
                  "bytecode": sys.dont_write_bytecode}
        os.write(config["fd_out"], json.dumps(report).encode())

    monkeypatch.setattr(child, "main", main)
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path)}
    stdin_r, stdin_w = os.pipe()                           # the grader's stdin, for the fork
    saved_stdin = os.dup(0)
    os.dup2(stdin_r, 0)
    try:
        proc = _fork_child({"workdir": str(tmp_path), "fd_out": from_w}, env, Limits(),
                           keep=(to_r, from_w))
        os.dup2(saved_stdin, 0)
        os.close(from_w)
        assert proc.wait(timeout=30) == 1
        report = json.loads(os.read(from_r, 1 << 16))
    finally:
        os.dup2(saved_stdin, 0)
        for fd in (stray, to_r, to_w, from_r, stdin_r, stdin_w, saved_stdin):
            os.close(fd)
    assert report["sid"] and report["cwd"] == str(tmp_path) and report["env"] == env
    assert report["stdio"] == ["/dev/null"] * 3
    assert report["fds"] == sorted([0, 1, 2, to_r, from_w])   # not stray, to_w nor from_r
    assert stdin_r not in report["fds"]
    assert report["fsize"] == 256 << 20 and report["bytecode"] is True


# -- why a child died -----------------------------------------------------------------------------
class _Ended:
    def __init__(self, code):
        self.code = code

    def wait(self, timeout=None):
        if self.code == "hangs":
            raise subprocess.TimeoutExpired("child", timeout)
        return self.code


@pytest.mark.parametrize("code,note", [
    (-signal.SIGKILL, "the sandbox died of SIGKILL (killed: a memory or time limit)"),
    (-signal.SIGXCPU, "the sandbox died of SIGXCPU (CPU time limit)"),
    (-signal.SIGSEGV, "the sandbox died of SIGSEGV (crashed)"),
    (-signal.SIGTERM, "the sandbox died of SIGTERM"),
    (3, "the sandbox exited with status 3"),
    (0, "the sandbox exited with status 0"),
    ("hangs", "the sandbox stopped answering"),
])
def test_a_dead_childs_note_says_why(code, note):
    assert Sandbox(proc=_Ended(code))._death_note() == note
    assert Sandbox()._death_note() == "the sandbox stopped answering"


# -- requests: time, budget, progress -------------------------------------------------------------
class _Alive:
    """A child that is always running; its pid is none of this machine's (never pid 0: a
    kill of the session 0 is a kill of the caller's own group)."""

    pid = 2**22 + 1                                       # above Linux's largest pid_max

    def poll(self):
        return None


class _Scripted(Sandbox):
    """A sandbox whose channel is replaced: each request's (payload, deadline, track) kept."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.proc, self.sent = _Alive(), []

    def _request_raw(self, payload, deadline, track=False):
        self.sent.append((payload, deadline, track))
        time.sleep(0.02)
        return "reply"


def test_a_request_runs_within_its_timeout_and_budget_and_counts_its_time():
    box = _Scripted(limits=Limits(timeout_s=5.0))
    box._hello = True
    begun = time.monotonic()
    assert box.request(("call", 1), timeout=30.0) == "reply"          # capped at the limit
    (payload, deadline, track), = box.sent
    assert track is True and payload == sandbox.dumps_for_child(("call", 1))
    assert begun + 4.9 < deadline <= time.monotonic() + 5.0
    assert 0.02 <= box.spent < 1.0
    box.request(("call", 2), timeout=1.0)
    assert box.sent[-1][1] <= time.monotonic() + 1.0
    box.request(("call", 3), budget=0.5)                              # under a second still runs
    assert box.sent[-1][1] <= time.monotonic() + 0.5
    assert box._replay == []


def test_no_budget_left_refuses_before_anything_is_sent():
    box = _Scripted()
    box._hello = True
    with pytest.raises(TimedOut, match="no time left"):
        box.request(("call",), budget=0.0)
    with pytest.raises(TimedOut):
        box.request(("call",), budget=-1.0)
    assert box.sent == []


def test_a_replayed_request_is_kept_and_sent_again_to_a_new_child():
    box = _Scripted(limits=Limits(timeout_s=2.0))
    box.request(("define", "f"), replay=True)
    hello, define = box.sent
    assert hello[0] == b"" and define[0] == box._replay[0]
    assert 0.02 <= box.booting < 1.0                       # the hello's wait is start-up time
    assert box.spent < 1.0
    box._hello = False                                      # a new child: hello, then replay
    box.request(("call", "f"))
    assert [p for p, _, _ in box.sent[2:]] == [b"", box._replay[0],
                                               sandbox.dumps_for_child(("call", "f"))]
    replay_deadline = box.sent[3][1]
    assert replay_deadline <= time.monotonic() + 2.0        # a replay has the call's limit


def test_progress_frames_are_kept_only_when_tracked_and_the_reply_follows_them():
    read_fd, write_fd = os.pipe()
    try:
        box = Sandbox()
        box._fds = (-1, read_fd)
        for track in (True, False):
            os.write(write_fd, frame(wire.dumps({"progress": 3}))
                     + frame(wire.dumps({"progress": 4})) + frame(wire.dumps({"x": 1})))
            box.progress = None
            assert box._request_raw(b"", time.monotonic() + 10, track=track) == {"x": 1}
            assert box.progress == (4 if track else None)
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- clean-up --------------------------------------------------------------------------------------
def test_kill_closes_both_channel_ends_even_if_one_is_gone():
    a, b = os.pipe()
    os.close(b)                                             # already closed elsewhere
    box = Sandbox()
    box._fds = (a, b)
    box.kill()
    assert box._fds is None and box.proc is None
    with pytest.raises(OSError):
        os.fstat(a)


def test_a_new_sandbox_folder_is_private_and_close_removes_it():
    box = Sandbox()
    box.start()
    try:
        assert stat.S_IMODE(os.stat(box.workdir).st_mode) == 0o700
        assert box.proc.poll() is None and box._hello is False
    finally:
        box.close()
    assert not box.workdir.exists() and box.proc is None


def test_only_a_forked_sandbox_may_read_the_zygotes_font_cache(tmp_path, monkeypatch):
    """A fork reads matplotlib's cache where its zygote built it (MPLCONFIGDIR); a new
    interpreter builds its own in its folder, and may not read the grader's."""
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "fonts"))
    started: dict = {}
    monkeypatch.setattr(sandbox, "_fork_child",
                        lambda config, env, limits, keep: started.update(fork=config) or _Alive())

    def popen(args, **kw):
        started["new"] = args[-1]
        return _Alive()

    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    for fork in (True, False):
        box = Sandbox()
        box.start(fork=fork)
        box.proc = None                                   # nothing was started
        box.close()
    assert str(tmp_path / "fonts") in started["fork"]["packages"]
    assert str(tmp_path / "fonts") not in started["new"]


def test_a_child_has_three_minutes_to_say_hello():
    box = _Scripted()
    before = time.monotonic()
    box._ready(10.0)
    after = time.monotonic()
    (payload, deadline, _), = box.sent
    assert payload == b"" and before + 180 <= deadline <= after + 180
