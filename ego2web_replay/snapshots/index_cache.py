"""A compact cache of a CDXJ index for replay: parse the index once, then load a pickle.

Replay needs, for every servable entry, its recorded order, URL, method and
POST body key, and the line itself (parsed fully only when served). Parsing
a 100k-line index takes seconds; the rows are therefore kept in the data
folder's ``index-cache/``, keyed by the index's path, size and mtime, and
written when the index is built (``finalize``, ``snapshot index``, import) or
on first replay. The cache is never the source of truth: a missing or stale
one is rebuilt from the index.

Every file of ``index-cache/`` (these pickles, the mapped indexes, replay's canonical keys) has its
access time set when it is used (:func:`mark_used`; its modification time is part of other files'
keys, so it is left alone). A cache file of an index that changed or went away is never used again:
:func:`prune_cache` (``ego2web-replay cache prune``) removes the files unused for a number of days.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ..atomic import atomic_write_bytes
from ..config import data_dir
from ..errors import ArchiveError
from ..models.index import IndexRow, index_row

__all__ = ["IndexRow", "index_rows", "parse_rows", "stream_rows", "cache_file", "warm_cache", "SERVABLE",
           "cache_dir", "mark_used", "CacheFile", "cache_files", "prune_cache", "trusted"]

SERVABLE = ("response", "revisit", "resource")
_CACHE_VERSION = 1
_CACHE_MIN_ROWS = 2000  # small indexes parse faster than a cache file opens


def cache_file(index: Path) -> Path | None:
    try:
        st = index.stat()
    except OSError:
        return None
    key = hashlib.sha256(f"{index.resolve()}|{st.st_size}|{st.st_mtime_ns}|{_CACHE_VERSION}".encode()).hexdigest()
    return data_dir() / "index-cache" / f"{key[:32]}.pickle"


def index_rows(path: Path) -> list[IndexRow]:
    """``(timestamp, offset, url, method, body query, line)`` of the servable entries, in recorded order.

    Parsed once per index version and kept in the data folder's ``index-cache/`` (keyed by the
    index's path, size and mtime), so a large index loads from a compact pickle afterwards.
    """
    cache = cache_file(path)
    if cache is not None and cache.is_file() and trusted(cache):
        try:
            with cache.open("rb") as fh:
                rows = pickle.load(fh)
            if isinstance(rows, list):
                mark_used(cache)
                return rows
        except Exception:  # noqa: BLE001 - a bad cache is rebuilt
            pass
    rows = parse_rows(path)
    if cache is not None and len(rows) >= _CACHE_MIN_ROWS:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(cache, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass
    return rows


def parse_rows(path: Path) -> list[IndexRow]:
    """The servable rows of the CDXJ index ``path`` in recorded order (by timestamp, then offset), parsed
    now; a corrupt line raises :class:`ArchiveError` naming file and line."""
    rows = list(stream_rows(path))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows


def stream_rows(path: Path) -> Iterator[IndexRow]:
    """The servable rows of the CDXJ index ``path`` in the file's order, read line by line (the
    lines :meth:`str.splitlines` gives); a corrupt line raises :class:`ArchiveError` naming file and line."""
    try:
        with path.open("r", encoding="utf-8") as fh:
            number = 0
            for raw in fh:
                for line in raw.splitlines():
                    number += 1
                    if not line:
                        continue
                    try:
                        rtype, row = index_row(line)
                    except (ValueError, KeyError, TypeError, AttributeError):
                        raise ArchiveError(f"{path}: line {number} is not a valid CDXJ line; rebuild it with "
                                           "`ego2web-replay snapshot index`") from None
                    if rtype in SERVABLE:
                        yield row
    except FileNotFoundError:
        raise ArchiveError(f"{path}: index not found; build it with `ego2web-replay snapshot index`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArchiveError(f"{path}: cannot read the index ({e})") from None


def warm_cache(index: Path) -> None:
    """Build the caches of ``index`` now (large indexes only): the mapped index (:mod:`.index_map`)
    that replay opens large snapshots with, what the map hooks derive from it
    (:func:`~.index_map.add_map_hook`: replay's canonical keys), and this compact cache; never fails
    the caller.

    All three are built from one read of the file (:mod:`.first_open`, the very bytes the rows give;
    the compact cache by :class:`~.compact_rows.CompactRows`, without the rows held); a hook without
    a rows form is run on the map once it is written. An index the one read leaves to the line
    readers (:class:`~.indexscan.IrregularIndex`) has everything built from the parsed rows, as
    before, and so has the compact cache of rows that :class:`~.compact_rows.CompactRows` leaves to
    pickle."""
    from .compact_rows import CompactRows
    from .first_open import build_first_open
    from .index_map import build_index_map, map_file, row_tables, run_map_hooks

    index = Path(index)
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        cache = cache_file(index)
        if cache is None:
            raise ArchiveError(f"{index}: index not found")
        tables = row_tables(cache_dir())
        compact = None if cache.is_file() and trusted(cache) else CompactRows(index, cache, cache_dir())
        try:
            try:
                done = build_first_open(index, learn=False, keys=[*(tables or ()), *([compact] if compact else [])],
                                        min_rows=_CACHE_MIN_ROWS)
            except (ArchiveError, ValueError):  # built below, as before (a failing hook logged and skipped)
                done = False
        finally:
            if compact is not None:
                compact.close()
        if done:
            if compact is not None and not compact.done and compact.count >= _CACHE_MIN_ROWS:
                index_rows(index)  # rows the table leaves to pickle
            if tables is None and (target := map_file(index)) is not None and target.is_file():
                run_map_hooks(index, target)
            return
        rows = index_rows(index)
        if len(rows) < _CACHE_MIN_ROWS:
            return
        target = build_index_map(index, rows)
        del rows  # the hooks read the map, not the parsed rows
        run_map_hooks(index, target)
    except (ArchiveError, OSError):
        pass


def trusted(cache: Path) -> bool:
    """A pickle runs code when loaded, and every cache decides what replay serves: load only caches this
    user wrote that nobody else can change."""
    try:
        st = cache.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


# -- the cache folder ------------------------------------------------------------------------------

def cache_dir() -> Path:
    """The data folder's ``index-cache/`` (it may not exist yet)."""
    return data_dir() / "index-cache"


def mark_used(path: Path) -> None:
    """Say that ``path`` was just used (its access time; the modification time stays)."""
    try:
        st = path.stat()
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except OSError:
        pass


class CacheFile(NamedTuple):
    path: Path
    size: int
    last_used: float  # seconds since the epoch: the later of its access and modification times


def cache_files() -> list[CacheFile]:
    """Every file in ``index-cache/``, least recently used first."""
    out = []
    try:
        entries = list(os.scandir(cache_dir()))
    except FileNotFoundError:
        return []
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        out.append(CacheFile(Path(entry.path), st.st_size, max(st.st_atime, st.st_mtime)))
    return sorted(out, key=lambda f: f.last_used)


def prune_cache(unused_days: float, *, dry_run: bool = False) -> tuple[list[CacheFile], list[CacheFile]]:
    """Remove the cache files not used for ``unused_days`` days: ``(removed, kept)``.

    Removing one that is in use is safe: an open or mapped file stays readable, and a missing
    one is rebuilt from its index the next time it is needed.
    """
    if unused_days < 0:
        raise ValueError("unused_days must be 0 or more")
    cutoff = time.time() - unused_days * 86400
    removed, kept = [], []
    for f in cache_files():
        if f.last_used >= cutoff:
            kept.append(f)
            continue
        if not dry_run:
            try:
                f.path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                kept.append(f)
                continue
        removed.append(f)
    return removed, kept
