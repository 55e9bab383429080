"""The project's exception types.

Every error a user can cause (a bad task file, a corrupt archive, a missing
snapshot, an unreachable judge endpoint ...) is raised as one of these, with a
message that says what went wrong and what to do. The CLI prints the message
on one line and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "Ego2WebError",
    "TaskFileError",
    "SnapshotError",
    "ArchiveError",
    "ProxyError",
    "BrowserError",
    "RecordingError",
    "ReplayError",
    "AgentError",
    "JudgeError",
    "TrackingError",
    "MediaError",
    "StorageError",
    "storage_error",
]


class Ego2WebError(Exception):
    """Base class of every error a user can cause; its message is shown as is."""

    exit_code = 1


class TaskFileError(Ego2WebError):
    """A task suite file is missing, unreadable or does not validate."""


class SnapshotError(Ego2WebError):
    """A snapshot folder is missing, incomplete or inconsistent."""


class ArchiveError(SnapshotError):
    """A WARC archive or its index cannot be read or written."""


class ProxyError(Ego2WebError):
    """The proxy could not start (port in use, bad option) or failed while running."""


class BrowserError(Ego2WebError):
    """Chromium could not be found or started."""


class RecordingError(Ego2WebError):
    """Recording failed; nothing is let through unrecorded."""


class ReplayError(Ego2WebError):
    """A replay could not be set up."""


class AgentError(Ego2WebError):
    """An agent name is unknown or an agent could not be started."""


class ModelEndpointError(AgentError):
    """The agent's model endpoint did not answer (server errors, timeouts, refused connections) after its
    retries: the episode could not run, which is not the agent's failure (an ``infra_error``)."""


class JudgeError(Ego2WebError):
    """A judge is unknown, misconfigured, or its endpoint is unreachable."""


class TrackingError(Ego2WebError):
    """The tracking database is missing, corrupt or locked."""


class MediaError(Ego2WebError):
    """A task's video is missing or cannot be decoded, or its captions cannot be made."""


class StorageError(Ego2WebError):
    """A file or folder could not be written, read or named: the disk is full or read-only, a name is too long,
    a path cannot be one (a file where a folder should be, no permission, nothing there)."""


_STORAGE = {
    errno.ENOSPC: "the disk is full: free some space (or write elsewhere) and run it again",
    errno.EDQUOT: "the disk quota is used up: free some space (or write elsewhere) and run it again",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EFBIG: "the file would be larger than this file system allows: write elsewhere",
    errno.ENAMETOOLONG: "a path, or one of its names, is longer than the file system allows: use a shorter one",
    # a path given for output (or input) that cannot be one: named, in one line
    errno.ENOTDIR: "a name on this path is a file, not a folder: choose another path",
    errno.EEXIST: "a file or folder of this name exists already, or a name on its path is a file: choose "
                  "another path",
    errno.EISDIR: "this is a folder, not a file: name a file",
    errno.EACCES: "permission denied: use a path you may write (or read), or change its permissions",
    errno.EPERM: "operation not permitted here: use another path",
    errno.ENOENT: "no such file or folder (or a folder on its path is missing and cannot be made there)",
}


_NO_PATH_NEEDED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def storage_error(e: OSError) -> StorageError | None:
    """The user's error an ``OSError`` of the machine's storage stands for (a full disk, a name too long, a file
    where a folder should be, no permission ...), with the path and what to do; None for any other ``OSError``
    (a broken connection, say: a bug is not turned into one line)."""
    what = _STORAGE.get(e.errno or 0)
    where = e.filename if isinstance(e.filename, (str, os.PathLike)) else None
    if what is None or (where is None and e.errno not in _NO_PATH_NEEDED):
        return None  # (a path error naming no path is no user's path: a socket, a bug; left a traceback)
    where = os.fspath(where) if where is not None else None
    if where is not None and len(where) > 120:
        where = where[:60] + "..." + where[-40:]
    return StorageError(f"{where}: {what}" if where else what)
