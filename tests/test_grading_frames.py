"""The frames between the grader and its sandboxed child (`lesson.course.grading.frames`): what
is written is what is read, whole, however the pipe splits it; an ended child and a deadline
are told apart; nothing waits past its deadline."""
from __future__ import annotations

import os
import struct
import threading
import time

import pytest

from lesson.course.grading.frames import SandboxDied, TimedOut, frame, read_frame


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def _write_later(fd: int, parts: list[bytes], pause: float = 0.02, close: bool = False) -> None:
    def run() -> None:
        for part in parts:
            time.sleep(pause)
            os.write(fd, part)
        if close:
            os.close(fd)
    threading.Thread(target=run, daemon=True).start()


def test_a_frame_is_its_length_little_endian_then_its_bytes():
    assert frame(b"abc") == struct.pack("<Q", 3) + b"abc" == b"\x03" + b"\0" * 7 + b"abc"
    assert frame(b"") == b"\0" * 8


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 9])
def test_what_is_written_is_read(pipe, payload):
    r, w = pipe
    os.write(w, frame(payload) + frame(b"next"))
    assert read_frame(r) == payload
    assert read_frame(r, deadline=time.monotonic() + 5) == b"next"   # nothing read past a frame


def test_a_frame_split_by_the_pipe_is_read_whole(pipe):
    r, w = pipe
    data = frame(b"0123456789")
    _write_later(w, [data[:3], data[3:9], data[9:12], data[12:]])
    assert read_frame(r, deadline=time.monotonic() + 5) == b"0123456789"


def test_a_frame_larger_than_one_read_is_read_whole(pipe):
    r, w = pipe
    payload = os.urandom((1 << 20) + 12345)                  # more than one 1 MiB read
    threading.Thread(target=os.write, args=(w, frame(payload)), daemon=True).start()
    assert read_frame(r, deadline=time.monotonic() + 10) == payload


def test_a_child_that_ended_is_not_a_timeout(pipe):
    r, w = pipe
    os.write(w, struct.pack("<Q", 10) + b"half")
    os.close(w)
    with pytest.raises(SandboxDied) as died:
        read_frame(r, deadline=time.monotonic() + 5)
    assert not isinstance(died.value, TimedOut) and "ended" in str(died.value)


def test_an_empty_pipe_that_closes_ended_the_child(pipe):
    r, w = pipe
    os.close(w)
    with pytest.raises(SandboxDied):
        read_frame(r)                                        # no deadline: EOF still ends it


def test_a_deadline_stops_the_wait(pipe):
    r, w = pipe
    start = time.monotonic()
    with pytest.raises(TimedOut, match="time limit"):
        read_frame(r, deadline=start + 0.2)
    assert 0.15 < time.monotonic() - start < 2
    os.write(w, struct.pack("<Q", 4) + b"ab")                # a frame cut off by the deadline
    with pytest.raises(TimedOut):
        read_frame(r, deadline=time.monotonic() + 0.1)


def test_a_deadline_already_past_reads_nothing(pipe):
    r, w = pipe
    os.write(w, frame(b"ready"))
    with pytest.raises(TimedOut):
        read_frame(r, deadline=time.monotonic() - 0.5)      # past, by less than a second
    assert read_frame(r, deadline=time.monotonic() + 5) == b"ready"   # still there, unread


def test_a_slow_writer_within_the_deadline_is_waited_for(pipe):
    r, w = pipe
    _write_later(w, [frame(b"late")], pause=0.2)
    assert read_frame(r, deadline=time.monotonic() + 5) == b"late"


def test_timed_out_is_a_kind_of_sandbox_death():
    assert issubclass(TimedOut, SandboxDied) and issubclass(SandboxDied, Exception)
