"""Killing what a grading child started, whether or not it has its own session yet."""
from __future__ import annotations

import os
import signal


def kill_session(pid: int) -> None:
    """SIGKILL the session `pid` leads and `pid` itself. A child forked a moment ago may not
    have run `setsid` yet: it then has no group of its own (`killpg` finds nothing), and a
    caller that waits for it after killing only the group waits forever."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
