"""The zygote's edges (`lesson.course.grading.zygote`), on one zygote of this module's: it has
imported the libraries before it says ready, a child's exit status and log as a fresh
interpreter's would be, the zygote leaves quietly when the grading process goes away, and the
pool hands a live zygote out again. tests/test_grading_zygote.py holds the rest."""
from __future__ import annotations

import os
import stat

import pytest

from lesson.course.grading import zygote
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
