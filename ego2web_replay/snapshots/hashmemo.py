"""sha256 of large files, remembered while the file provably has not changed.

Replay compares a snapshot's archive and index with the manifest's sha256s before serving; for a
million captures that is a gigabyte read on every open. :func:`remembered_sha256` hashes a file once
and remembers the digest in the data folder's ``hash-memo/`` with the file's identity: device,
inode, size, mtime and ctime. Any write to the file, a ``touch``, a ``chmod`` or a rename over it
moves the ctime, and no user can set the ctime back (``utime`` sets mtime only and moves the ctime
to now), so a memo whose identity still matches describes the same bytes. A memo is trusted only
when the file's last change was at least :data:`SETTLE_SECONDS` before it was hashed: file times
tick coarsely (milliseconds), and a change in the same tick as the hashing would otherwise keep
its identity (git's "racy clean" problem, solved the same way).

``snapshot verify`` never uses this: it re-reads and re-hashes everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from ..atomic import atomic_write_text
from ..config import data_dir

__all__ = ["remembered_sha256", "SETTLE_SECONDS"]

SETTLE_SECONDS = 2.0


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _memo_file(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir() / "hash-memo" / f"{key[:32]}.json"


_CHUNK = 8 << 20


def _hash(path: Path) -> str:
    """sha256 of the file, read a few MiB at a time: reading and hashing each release the GIL, so a
    file hashed on a thread beside Python work takes the GIL back rarely (``hashlib.file_digest``'s
    256 KiB would need it thousands of times a gigabyte, each wait up to a switch interval)."""
    digest = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while size := fh.readinto(buf):
            digest.update(view[:size])
    return digest.hexdigest()


def remembered_sha256(path: Path) -> str:
    """The sha256 (hex) of ``path``: remembered when the file is unchanged since it was hashed, else computed."""
    path = Path(path)
    before = os.stat(path)
    memo = _memo_file(path)
    try:
        data = json.loads(memo.read_text("utf-8"))
        if data["identity"] == _identity(before) and data["hashed_at_ns"] - before.st_ctime_ns >= SETTLE_SECONDS * 1e9:
            return str(data["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    hashed_at = time.time_ns()
    digest = _hash(path)
    after = os.stat(path)
    if _identity(after) == _identity(before):  # not changed while it was read
        try:
            atomic_write_text(memo, json.dumps({"path": str(path.resolve()), "identity": _identity(after),
                                                "hashed_at_ns": hashed_at, "sha256": digest}))
        except OSError:
            pass  # remembering is an optimisation
    return digest
