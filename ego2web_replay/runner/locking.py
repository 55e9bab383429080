"""One writer per run folder: a run or resume holds ``<run>/.run.lock`` while it writes.

The lock is an exclusive ``flock`` taken without waiting, so a second ``run``
or ``--resume`` of the same folder fails at once with one line naming the
holder's pid, instead of two runners writing the same episodes. The kernel
releases it when the holder exits, however it exits, so a killed run never
leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from ..errors import Ego2WebError, storage_error

__all__ = ["RunFolderLock", "LOCK_NAME"]

LOCK_NAME = ".run.lock"


class RunFolderLock:
    """``with RunFolderLock(run_dir): ...`` (or :meth:`acquire` / :meth:`release`)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fh: IO[str] | None = None

    def acquire(self) -> RunFolderLock:
        try:
            fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        except OSError as e:
            raise Ego2WebError(f"cannot lock the run folder {self.path.parent} ({e.strerror or e})") from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise Ego2WebError(f"the run folder {self.path.parent} is in use by another run or resume "
                               f"(pid {holder}); wait for it to finish") from None
        try:  # unbuffered, so a full disk fails here, once, and leaves nothing for close() to flush
            os.ftruncate(fh.fileno(), 0)
            os.pwrite(fh.fileno(), str(os.getpid()).encode(), 0)
        except OSError as e:
            fh.close()
            e.filename = str(self.path)
            raise storage_error(e) or Ego2WebError(
                f"cannot write the lock of the run folder {self.path.parent} ({e.strerror or e})") from None
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
