"""The zygote's edges (`lesson.course.grading.zygote`), on one zygote of this module's: it has
imported the libraries before it says ready, a child's exit status and log as a fresh
interpreter's would be, the zygote leaves quietly when the grading process goes away, and the
pool hands a live zygote out again. tests/test_grading_zygote.py holds the rest."""
from __future__ import annotations

import io
import json
import os
import stat
import struct
import time

import pytest

from lesson.course.grading import zygote
from lesson.course.grading.frames import frame, read_frame
from tests.test_grading_zygote import run_script


@pytest.fixture(scope="module")
def warm():
    z = zygote.Zygote()
    yield z
    z.close()


def test_a_zygote_has_imported_the_libraries_when_it_says_ready(warm):
    fresh = zygote.Zygote()
    try:
        assert fresh.mapped_mb == 0.0 and not fresh._ready     # nothing known before hello
    finally:
        fresh.close()
    warm.ready()
    assert warm.mapped_mb > 300                    # torch, NumPy and matplotlib mapped


@pytest.mark.parametrize("source,code", [
    ("print('fine')", 0),
    ("raise SystemExit(4)", 4),
    ("raise SystemExit('a message, no number')", 1),
    ("raise SystemExit", 0),
    ("raise ValueError('bad')", 1),
])
def test_a_childs_exit_status_is_a_fresh_interpreters(warm, tmp_path, source, code):
    got, log = run_script(warm, tmp_path, source)
    assert got == code
    if "ValueError" in source:
        assert "ValueError: bad" in log
    if "a message" in source:
        assert log == "a message, no number\n"     # printed, as an interpreter does


def test_a_child_holds_no_channel_to_the_zygote(warm, tmp_path):
    """The fork closes the protocol's pipes: a sandbox's code cannot write an answer of its
    own to the grading process, nor read the next request."""
    code, out = run_script(warm, tmp_path, "import os, stat\n"
                           "pipes = []\n"
                           "for name in os.listdir('/proc/self/fd'):\n"
                           "    try:\n"
                           "        if stat.S_ISFIFO(os.fstat(int(name)).st_mode):\n"
                           "            pipes.append(int(name))\n"
                           "    except OSError:\n"
                           "        pass\n"
                           "print(pipes)\n")
    assert (code, out) == (0, "[]\n")


def test_a_childs_log_is_private(warm, tmp_path):
    run_script(warm, tmp_path, "print('x')")
    (log,) = tmp_path.glob("*.log")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


@pytest.mark.parametrize("goodbye", [b"", b"\x05\x00\x00\x00\x00\x00\x00\x00nope!"])
def test_the_zygote_leaves_quietly_when_the_grading_process_goes(goodbye):
    """Its channel closed (end of file) or a frame that is not JSON: exit status 0."""
    z = zygote.Zygote()
    try:
        z.ready()
        if goodbye:
            os.write(z._to, goodbye)
        else:
            os.close(z._to)
            z._to = -1
        assert z.proc.wait(timeout=60) == 0
    finally:
        z.close()


def test_close_closes_both_channel_ends_and_may_run_twice():
    z = zygote.Zygote()
    ends = (z._to, z._from)
    z.close()
    for fd in ends:
        with pytest.raises(OSError):
            os.fstat(fd)
    z.close()                                      # again: nothing left to close, no error
    assert not z.alive() and not z.home.exists()
    for fd in (1, 2):                              # and nothing of this process's closed
        os.fstat(fd)


def test_the_zygotes_of_the_pool_are_closed_when_the_grading_process_ends(monkeypatch):
    closed = []

    class Pooled:
        def close(self) -> None:
            closed.append(self)
    pool = [Pooled(), Pooled()]
    monkeypatch.setattr(zygote, "_POOL", list(pool))
    zygote._close_all()
    assert closed == pool[::-1] and zygote._POOL == []


def test_the_pool_hands_out_a_live_zygote_again_and_replaces_a_dead_one(monkeypatch):
    monkeypatch.setattr(zygote, "_POOL", [])
    with zygote.zygote() as first:
        pass
    with zygote.zygote() as again:
        assert again is first
    first.close()                                  # dies: the next one is new
    with zygote.zygote() as other:
        assert other is not first and other.alive()
    assert zygote._POOL == [other]
    other.close()


def test_prewarm_is_nothing_without_fork(monkeypatch):
    monkeypatch.setattr(zygote, "ENABLED", False)
    monkeypatch.setattr(zygote, "Zygote", lambda: pytest.fail("no zygote without fork"))
    assert zygote.prewarm() == 0.0


def test_mapped_mb_is_vmsize_in_mb_and_0_where_proc_cannot_be_read(monkeypatch):
    assert zygote.mapped_mb() > 0                  # this process, read from /proc/self/status
    status = "Name:\tpython\nVmPeak:\t  9999 kB\nVmSize:\t  3072 kB\nVmRSS:\t  512 kB\n"
    monkeypatch.setattr("builtins.open", lambda *a, **k: io.StringIO(status))
    assert zygote.mapped_mb() == 3.0

    def unreadable(*args, **kwargs):
        raise PermissionError("no /proc here")
    monkeypatch.setattr("builtins.open", unreadable)
    assert zygote.mapped_mb() == 0.0


def test_a_child_starts_with_every_preloaded_module_imported(warm, tmp_path):
    code, out = run_script(warm, tmp_path, "import sys\n"
                           f"print([m for m in {zygote.PRELOAD!r} if m not in sys.modules])\n")
    assert (code, out) == (0, "[]\n")


def test_a_child_whose_output_cannot_be_flushed_still_ends_with_its_own_status(warm, tmp_path):
    """The flush at the end must not raise out of the child: the fork would carry on as a
    second zygote instead of exiting with the target's status."""
    source = ("import sys\n"
              "class Broken:\n"
              "    def write(self, text): return len(text)\n"
              "    def flush(self): raise OSError('the log is gone')\n"
              "sys.stdout = sys.stderr = Broken()\n"
              "raise SystemExit({})\n")
    assert run_script(warm, tmp_path, source.format(0))[0] == 0
    assert run_script(warm, tmp_path, source.format(5))[0] == 5


def test_the_zygote_serves_requests_that_overlap(warm, tmp_path):
    """A child that ends while another still runs: the zygote reports it, and forks and
    reports a new request at once rather than waiting for the other (the handle makes one
    request at a time; the zygote's loop must not rely on it)."""
    warm.ready()

    def request(n: int, source: str) -> None:
        script = tmp_path / f"{n}.py"
        script.write_text(source)
        os.write(warm._to, frame(json.dumps({
            "id": n, "target": "runpy:run_path", "kwargs": {"path_name": str(script)},
            "cwd": str(tmp_path), "log": str(tmp_path / f"{n}.log")}).encode()))

    statuses = []

    def until_status(n: int) -> None:
        while n not in [i for i, _ in statuses]:
            answer = json.loads(read_frame(warm._from, time.monotonic() + 60))
            if "status" in answer:
                statuses.append((answer["id"], answer["status"]))

    request(101, "import time; time.sleep(6); raise SystemExit(7)\n")
    request(102, "raise SystemExit(2)\n")
    until_status(102)
    request(103, "raise SystemExit(4)\n")          # while 101 still sleeps
    until_status(101)
    assert statuses == [(102, 2), (103, 4), (101, 7)]
    assert warm.alive()
    assert run_script(warm, tmp_path, "raise SystemExit(9)")[0] == 9   # the handle goes on


class _Proc:
    """The zygote process of a scripted handle: alive until killed."""

    def __init__(self) -> None:
        self.killed = False

    def poll(self) -> int | None:
        return -9 if self.killed else None

    def kill(self) -> None:
        self.killed = True

    def wait(self) -> int:
        return -9


@pytest.fixture()
def scripted(tmp_path):
    """A handle on a 'zygote' that is two pipes: `answer(message)` writes what it says, and
    `requests()` reads what the handle asked."""
    z = object.__new__(zygote.Zygote)
    z.home = tmp_path / "home"
    z.home.mkdir()
    z._from, answers = os.pipe()
    asked, z._to = os.pipe()
    z.proc, z._ready, z._next, z.mapped_mb = _Proc(), True, 0, 0.0

    def answer(**message) -> None:
        os.write(answers, frame(json.dumps(message).encode()))

    def requests() -> list[dict]:
        os.set_blocking(asked, False)
        data = os.read(asked, 1 << 16)
        out = []
        while data:
            (n,), data = struct.unpack("<Q", data[:8]), data[8:]
            out.append(json.loads(data[:n]))
            data = data[n:]
        return out

    z.answer, z.requests = answer, requests
    yield z
    z.close()
    for fd in (answers, asked):
        os.close(fd)


PID = 2**22 + 1           # no process of this machine's: never pid 0, which kill_session(0) reads
                          # as the test's own group


def _run(z, tmp_path, timeout=5.0):
    return z.run("m:f", {}, cwd=tmp_path, log=tmp_path / "log", timeout=timeout)


def test_each_request_has_its_own_id_and_takes_only_its_answers(scripted, tmp_path):
    for n, status in ((1, 3), (2, 0)):
        scripted.answer(id=n, pid=PID)
        scripted.answer(id=n, status=status)
        assert _run(scripted, tmp_path) == status
    assert [r["id"] for r in scripted.requests()] == [1, 2]


@pytest.mark.parametrize("answers", [
    [{"id": 0, "status": -9}],                        # an earlier request's late status
    [{"id": 1, "pid": PID}, {"id": 1, "pid": PID}],   # a pid where the status belongs
    [{"id": 2, "pid": PID}],                          # a later request's
])
def test_an_answer_out_of_step_ends_the_zygote(scripted, tmp_path, answers):
    for message in answers:
        scripted.answer(**message)
    with pytest.raises(zygote.ZygoteGone, match="out of step"):
        _run(scripted, tmp_path)
    assert not scripted.alive()


def test_a_zygote_that_does_not_fork_in_time_is_gone(scripted, tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "REPLY_S", 0.2)
    with pytest.raises(zygote.ZygoteGone, match="did not fork"):
        _run(scripted, tmp_path)
    assert not scripted.alive()


def test_a_child_past_its_time_is_killed_and_its_status_read_before_the_next_request(
        scripted, tmp_path, monkeypatch):
    killed = []

    def kill(pid):
        killed.append(pid)
        scripted.answer(id=1, status=-9)            # the zygote reports the killed child
    monkeypatch.setattr(zygote, "kill_session", kill)
    scripted.answer(id=1, pid=PID)
    assert _run(scripted, tmp_path, timeout=0.2) is None
    assert killed == [PID] and scripted.alive()
    scripted.answer(id=2, pid=PID)
    scripted.answer(id=2, status=0)
    assert _run(scripted, tmp_path) == 0            # not the killed child's status


def test_a_zygote_that_never_reports_its_killed_child_is_not_used_again(
        scripted, tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "kill_session", lambda pid: None)
    monkeypatch.setattr(zygote, "REPLY_S", 0.2)
    scripted.answer(id=1, pid=PID)
    assert _run(scripted, tmp_path, timeout=0.2) is None
    assert not scripted.alive()                     # the pool drops it


def test_a_channel_that_fails_to_read_ends_the_zygote(scripted, tmp_path, monkeypatch):
    def failing(fd, deadline=None):
        raise OSError("Bad file descriptor")
    monkeypatch.setattr(zygote, "read_frame", failing)
    with pytest.raises(zygote.ZygoteGone, match="stopped answering"):
        _run(scripted, tmp_path)
    assert not scripted.alive()


@pytest.mark.parametrize("hello,gone", [
    ({"ready": True, "pid": PID, "mapped_mb": 812.5}, None),
    ({"ready": True, "pid": PID}, None),                  # an address space it could not read
    ({"ready": False, "pid": PID}, "where it says it is ready"),
    ({"id": 1, "status": 0}, "where it says it is ready"),
    (None, "did not start in time"),
])
def test_a_zygote_is_ready_once_it_says_so(scripted, monkeypatch, hello, gone):
    scripted._ready = False
    monkeypatch.setattr(zygote, "STARTUP_S", 0.2)
    if hello is not None:
        scripted.answer(**hello)
    if gone:
        with pytest.raises(zygote.ZygoteGone, match=gone):
            scripted.ready()
        assert not scripted.alive()
        return
    scripted.ready()
    assert scripted._ready and scripted.mapped_mb == hello.get("mapped_mb", 0.0)
    scripted.ready()                                      # once: no second hello awaited
