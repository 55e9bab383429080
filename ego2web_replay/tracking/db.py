"""Opening the tracking database safely from many processes at once.

DuckDB lets one process at a time open a database file for writing, and a
process that tries while another holds it fails at once with a lock error.
Our strategy, which every reader and writer here follows:

1. **A file lock around every use.** Before opening ``<db>``, a process takes
   ``fcntl.flock`` on the side file ``<db>.lock``: exclusive to write, shared
   to read. Waiters queue on the lock (polled, with a timeout) behind a
   turnstile lock ``<db>.lock.queue``, so concurrent ``record``/``run``/
   ``judge``/``ingest`` commands take turns instead of failing or starving.
2. **Short connections.** A connection is opened per write (one transaction:
   rows of one episode, one snapshot or one run), committed and closed, so
   the lock is held for milliseconds.
3. **Retry with backoff** when DuckDB itself still reports a conflicting lock
   (a process outside this protocol, such as a ``duckdb`` shell, holds the
   file); after the timeout the error says who holds it.

A transaction that fails is rolled back, so an interrupted command leaves no
half-written rows.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import overload

import duckdb

from ..config import DEFAULT_DB
from ..errors import TrackingError
from ..retry import RetriesExhausted, retry_call
from .schema import CURRENT_VERSION, migrate, missing_migrations, schema_version

__all__ = ["DEFAULT_DB", "LOCK_TIMEOUT_S", "write_connection", "read_connection", "lock_path", "db_time"]

LOCK_TIMEOUT_S = 120.0
_POLL_S = 0.005


@overload
def db_time(ts: datetime) -> datetime: ...


@overload
def db_time(ts: None) -> None: ...


def db_time(ts: datetime | None) -> datetime | None:
    """A time as the tables keep it: naive UTC (DuckDB's TIMESTAMP has no zone)."""
    if ts is None or ts.tzinfo is None:
        return ts
    return ts.astimezone(UTC).replace(tzinfo=None)


def lock_path(db_path: str | os.PathLike[str]) -> Path:
    """The side file whose ``flock`` serialises access to ``db_path``."""
    p = Path(db_path)
    return p.with_name(p.name + ".lock")


def _acquire(fd: int, mode: int, deadline: float, db_path: Path, timeout: float) -> None:
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            if time.monotonic() > deadline:
                raise TrackingError(
                    f"{db_path}: database busy for {timeout:.0f}s (another command is writing); try again"
                ) from None
            time.sleep(_POLL_S)


@contextmanager
def _file_lock(db_path: Path, exclusive: bool, timeout: float) -> Iterator[None]:
    """Hold ``<db>.lock`` (exclusive or shared) for the body.

    To be fair, a process first takes the turnstile ``<db>.lock.queue`` and keeps
    it until it holds the main lock: a writer that has just released the main
    lock cannot take it straight back while another process is waiting, so
    bulk writers alternate instead of starving each other.
    """
    main = lock_path(db_path)
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(main, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise TrackingError(f"{db_path}: cannot create its lock file {main.name} ({e.strerror or e}); "
                            "choose a --db in a writable folder") from None
    try:
        queue_fd = os.open(main.with_name(main.name + ".queue"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        os.close(lock_fd)
        raise TrackingError(f"{db_path}: cannot create its lock file {main.name}.queue ({e.strerror or e})") from None
    deadline = time.monotonic() + timeout
    try:
        _acquire(queue_fd, fcntl.LOCK_EX, deadline, db_path, timeout)
        try:
            _acquire(lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline, db_path, timeout)
        finally:
            fcntl.flock(queue_fd, fcntl.LOCK_UN)
        yield
    finally:
        os.close(queue_fd)
        os.close(lock_fd)  # closing the descriptor releases the lock


def _is_lock_conflict(e: duckdb.Error) -> bool:
    text = str(e)
    return "Could not set lock" in text or "Conflicting lock" in text


def _is_lock_error(e: Exception) -> bool:
    return isinstance(e, duckdb.Error) and _is_lock_conflict(e)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _connect(db_path: Path, read_only: bool, timeout: float) -> duckdb.DuckDBPyConnection:
    try:
        return retry_call(lambda: duckdb.connect(str(db_path), read_only=read_only), timeout_s=timeout,
                          backoff_s=0.02, backoff_max_s=1.0, transient=_is_lock_error)
    except RetriesExhausted as e:
        raise TrackingError(f"{db_path}: locked by another program ({_first_line(e.last)})") from None
    except duckdb.Error as e:
        raise TrackingError(
            f"{db_path}: not a readable DuckDB database ({_first_line(e)}); move it away and rebuild it with "
            "`ego2web-replay ingest`"
        ) from None


def _require_file(db_path: Path) -> None:
    if not db_path.exists():
        raise TrackingError(
            f"{db_path}: no tracking database here; build one with `ego2web-replay ingest SNAPSHOTS RUNS --db {db_path}`"
        )
    if db_path.is_dir():
        raise TrackingError(f"{db_path}: is a folder, not a DuckDB database file")


@contextmanager
def write_connection(
    db_path: str | os.PathLike[str] = DEFAULT_DB, *, timeout: float = LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """One write transaction: lock, open (creating and migrating), ``BEGIN``; commit on
    success, roll back on any exception; then close and unlock."""
    path = Path(db_path)
    if path.is_dir():
        raise TrackingError(f"{path}: is a folder, not a DuckDB database file")
    with _file_lock(path, exclusive=True, timeout=timeout):
        con = _connect(path, read_only=False, timeout=timeout)
        try:
            _checked_version(con, path)  # writers refuse what readers refuse: another program's file, a newer schema
            con.execute("BEGIN TRANSACTION")
            try:
                migrate(con)
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        except duckdb.Error as e:
            raise TrackingError(f"{path}: database write failed ({str(e).splitlines()[0]})") from None
        finally:
            con.close()


def _checked_version(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    try:
        version = schema_version(con)
    except duckdb.Error as e:
        raise TrackingError(f"{path}: not a tracking database ({str(e).splitlines()[0]})") from None
    tables = con.execute("SELECT count(*) FROM information_schema.tables").fetchone()
    if version == 0 and tables and tables[0]:
        raise TrackingError(
            f"{path}: a DuckDB file but not a tracking database; choose another --db or build one with "
            "`ego2web-replay ingest`"
        )
    if version > CURRENT_VERSION:
        raise TrackingError(
            f"{path}: schema version {version} is newer than this program's {CURRENT_VERSION}; "
            "upgrade ego2web-replay"
        )
    return version


@contextmanager
def read_connection(
    db_path: str | os.PathLike[str] = DEFAULT_DB, *, timeout: float = LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to an existing tracking database, held under a shared lock.

    A database of an older schema version is migrated first (under the write lock).
    """
    path = Path(db_path)
    _require_file(path)
    with _file_lock(path, exclusive=False, timeout=timeout):
        con = _connect(path, read_only=True, timeout=timeout)
        try:
            version = _checked_version(con, path)
            stale = version < CURRENT_VERSION or bool(missing_migrations(con))
        finally:
            con.close()
    if stale:
        with write_connection(path, timeout=timeout):
            pass
    with _file_lock(path, exclusive=False, timeout=timeout):
        con = _connect(path, read_only=True, timeout=timeout)
        try:
            yield con
        except duckdb.Error as e:
            raise TrackingError(f"{path}: database read failed ({str(e).splitlines()[0]})") from None
        finally:
            con.close()
