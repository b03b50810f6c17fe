"""Length-prefixed frames between the grader and its sandboxed child, and how a child ends."""
from __future__ import annotations

import os
import select
import struct
import time


class SandboxDied(Exception):
    """The child ended (a crash, a limit, `os._exit`) or ran past its deadline."""


class TimedOut(SandboxDied):
    """The request ran past the wall-clock limit; the child was killed."""


def frame(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimedOut("ran past the time limit")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise SandboxDied("the sandbox ended")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None) -> bytes:
    (n,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    return _read_exact(fd, n, deadline)
