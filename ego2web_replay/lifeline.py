"""Child processes die with their parent: no orphaned workers, agents or browsers.

:func:`die_with_parent` asks Linux to kill the calling process when its parent
dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)`` through ctypes) and exits at once if
the parent is already gone; where prctl is not available a daemon thread
watches ``getppid()`` instead. Run it first thing in a worker (a process pool's
``initializer``) or, as :func:`preexec_die_with_parent`, between fork and exec of
a program the project starts. A worker's Playwright driver then sees its pipe
close and takes its Chromium down with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent", "preexec_die_with_parent"]

_PR_SET_PDEATHSIG = 1


def _prctl_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != parent:
            os._exit(1)


def die_with_parent(parent_pid: int | None = None, *, interval: float = 0.5) -> None:
    """Make this process end when ``parent_pid`` (default: the current parent) ends."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    armed = _prctl_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch, args=(parent, interval), name="lifeline", daemon=True).start()


def preexec_die_with_parent() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the program gets SIGKILL when its starter dies."""
    _prctl_pdeathsig(signal.SIGKILL)
