"""Volatility learned from an index that has no ``volatile.json``, kept in the data folder's ``index-cache/``.

A snapshot written before learning existed (or copied without its side files) has only its index:
replay learns its volatile names from it (:mod:`.volatility`) when it opens. That costs seconds for
100k captures, so what is learned is kept as a small JSON file in ``index-cache/``, keyed like the
other cache files by the index's path, size and mtime, and by the learner's code (a change to
:mod:`.volatility` learns again). Like every cache file it is loaded only when this user wrote it and
nobody else can change it (:func:`~.index_cache.trusted`), is never the source of truth (a missing,
stale or unreadable one is learned again) and is listed and pruned by ``ego2web-replay cache``.
A snapshot that has a ``volatile.json`` reads that instead; this cache is never consulted.

Learning streams the index: its lines are read one at a time, never held as a list of entries; a
first read finds the path groups met more than once (a group of one capture teaches nothing), and
only their captures are grouped by path through sorted runs on disk, so memory holds a hash per
capture and one path's captures.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import ArchiveError
from ..models.index import learn_row
from . import volatility as _volatility_module
from .cdxj import CdxjEntry
from .index_cache import cache_dir, mark_used, trusted
from .indexscan import Batch
from .sortedfile import ExternalSorter
from .volatility import learn_from_index, learn_grouped, path_group

__all__ = ["learned_file", "learn_index_file", "learned_of_index", "Learner", "cached_learned", "keep_learned",
           "index_identity", "MIN_BYTES"]

_VERSION = 1
MIN_BYTES = 256 * 1024  # about 1,000 index lines: below, learning is quicker than a cache file is worth
_CODE: str | None = None


def _learner_code() -> str:
    global _CODE
    if _CODE is None:
        _CODE = hashlib.sha256(Path(_volatility_module.__file__ or "").read_bytes()).hexdigest()
    return _CODE


def _identity(index: Path) -> str | None:
    try:
        st = index.stat()
    except OSError:
        return None
    return f"{index.resolve()}|{st.st_size}|{st.st_mtime_ns}|{_learner_code()}|volatile{_VERSION}"


def learned_file(index: Path) -> Path | None:
    """Where what was learned from ``index`` is kept (None when the index cannot be read)."""
    identity = _identity(Path(index))
    if identity is None:
        return None
    return cache_dir() / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.volatile.json"


def _lines(index: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the index lines that are not blank or a header (as parse_index)."""
    try:
        with index.open("r", encoding="utf-8", newline="") as fh:
            for number, raw in enumerate(fh, 1):
                line = raw.rstrip("\r\n")
                if line.strip() and not line.startswith("!"):
                    yield number, line
    except FileNotFoundError:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArchiveError(f"{index}: cannot read the index ({e})") from None


def _teachers(index: Path, wanted: Callable[[int], bool] = lambda _n: True) -> Iterator[tuple[int, str, str, str | None, str]]:
    """``(line number, path group, url, body query, digest)`` of the captures that can teach (a
    response or revisit with a query or a body), of the lines ``wanted`` says to read."""
    for number, line in _lines(index):
        if not wanted(number):
            continue
        try:
            rtype, method, url, body, digest = learn_row(line)
        except (ValueError, KeyError, TypeError):
            raise ArchiveError(f"{index}: line {number} is not a valid CDXJ line; rebuild with "
                               "`ego2web-replay snapshot index`") from None
        if rtype in ("response", "revisit") and ("?" in url or body):
            yield number, path_group(method, url), url, body, digest


def learn_index_file(index: Path) -> dict[str, list[str]]:
    """:func:`~.volatility.learn_from_index` of the index file ``index`` in bounded memory (see
    :class:`Learner`)."""
    learner = Learner()
    for number, group, _url, _body, _digest in _teachers(index):
        learner.note(number, group)
    return learner.learn(index)


def _fold(group: str) -> str:
    """What the first read hashes of a path group: lower-cased, its last slashes cut. Equal groups
    fold alike (``http://a?q`` and ``http://a/?q`` too, which path_group makes one); groups that fold
    alike but differ (a path's case, its last slashes) are only read again by :meth:`Learner.learn`,
    which groups by the groups themselves: the hash picks lines to read, never what is learned."""
    return group.lower().rstrip("/")


class Learner:
    """Learning from an index file in bounded memory, in two reads of it.

    The first read (:meth:`note`, or :meth:`add_batch` when :mod:`.indexscan` reads the index for
    its other builders too) notes a hash of the path group of each capture that can teach; a group
    met once (most of them) cannot teach anything, so :meth:`learn` reads again only the captures
    of groups whose hash came more than once (none when no group did), sorts them by group through
    sorted runs in temporary files (:class:`~.sortedfile.ExternalSorter`), and learns one group at
    a time."""

    def __init__(self) -> None:
        self._numbers, self._hashes = array("q"), array("q")

    def note(self, number: int, group: str) -> None:
        self._numbers.append(number)
        self._hashes.append(hash(_fold(group)))

    def add_batch(self, batch: Batch) -> None:
        """:meth:`note` of each capture of ``batch`` that can teach. The folded group (:func:`_fold`)
        of a whole block is worked out from one string of ``METHOD url`` lines
        lower-cased at once, then the query and last slashes cut) instead of a path group built a
        line at a time; a block with a fragment or a line break in a URL, or an odd method, line by line."""
        rows = batch.teaching
        if not rows:
            return
        every = len(rows) == len(batch.urls)  # every row teaches (rows: each row once)
        urls = batch.urls if every else [batch.urls[i] for i in rows]
        methods = set(batch.methods)
        if len(methods) == 1:  # one method (GET, nearly always): its name joined in with the URLs
            method = f"{next(iter(methods))} "
            joined = method + f"\n{method}".join(urls)
            taught = [method[:-1]] * len(urls)
        else:
            taught = batch.methods if every else [batch.methods[i] for i in rows]
            joined = "\n".join([f"{m} {u}" for m, u in zip(taught, urls, strict=True)])
        odd = any(not m.isascii() or "?" in m for m in methods)  # lower() undoing upper(); a cut
        if odd or "#" in joined or joined.count("\n") != len(urls) - 1:
            groups = [_fold(path_group(m, u)) for m, u in zip(taught, urls, strict=True)]
        else:
            groups = [line.partition("?")[0].rstrip("/") for line in joined.lower().split("\n")]
        numbers = batch.numbers
        if isinstance(numbers, range) and every:
            self._numbers.extend(numbers)
        else:
            self._numbers.extend([numbers[i] for i in rows])
        self._hashes.extend(map(hash, groups))

    def learn(self, index: Path) -> dict[str, list[str]]:
        import numpy as np  # here, not at import: a snapshot with its learned cache needs none of it

        index = Path(index)
        hashes = np.frombuffer(self._hashes, dtype=np.int64)
        keys, counts = np.unique(hashes, return_counts=True)
        lines = np.frombuffer(self._numbers, dtype=np.int64)[np.isin(hashes, keys[counts > 1])]
        del hashes, keys, counts
        self._numbers, self._hashes = array("q"), array("q")
        flags = np.zeros(int(lines.max()) + 1 if len(lines) else 0, dtype=np.uint8)
        flags[lines] = 1
        wanted = bytearray(flags.tobytes())  # wanted[number]: the line is read again
        del lines, flags
        by_group = ExternalSorter(cache_dir())
        try:
            if wanted:
                for number, group, url, body, digest in _teachers(index, lambda n: n < len(wanted) and wanted[n] == 1):
                    by_group.add(group.encode("utf-8", "surrogatepass"), number, json.dumps([url, body, digest]).encode())
            return learn_grouped((group.decode("utf-8", "surrogatepass"), *json.loads(payload))
                                 for group, _seq, payload in by_group)
        except OSError as e:
            raise ArchiveError(f"{index}: cannot sort the index to learn from it ({e.strerror})") from None
        finally:
            by_group.close()


def _load(cache: Path, identity: str) -> dict[str, list[str]] | None:
    if not cache.is_file() or not trusted(cache):
        return None
    try:
        data = json.loads(cache.read_text("utf-8"))
        if data.get("version") != _VERSION or data.get("identity") != identity:
            return None
        paths = data["paths"]
        learned = {str(k): [str(n) for n in v] for k, v in paths.items() if isinstance(v, list)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    mark_used(cache)
    return learned


def cached_learned(index: Path) -> dict[str, list[str]] | None:
    """What was learned from this version of ``index`` and kept, or None."""
    index = Path(index)
    identity = _identity(index) if index.is_file() else None
    cache = learned_file(index) if identity is not None else None
    return _load(cache, identity) if cache is not None and identity is not None else None


def keep_learned(index: Path, identity: str | None, learned: dict[str, list[str]]) -> None:
    """Keep ``learned`` for the next open of a large ``index`` (of ``identity``, taken before it was
    read: nothing is kept when the index changed while it was read)."""
    index = Path(index)
    cache = learned_file(index)
    if identity is None or cache is None or _identity(index) != identity or index.stat().st_size < MIN_BYTES:
        return
    try:
        atomic_write_text(cache, json.dumps({"version": _VERSION, "identity": identity, "paths": learned}) + "\n")
    except OSError:
        pass


def index_identity(index: Path) -> str | None:
    """What the kept learned names of ``index`` are keyed by (None when it cannot be read)."""
    return _identity(Path(index))


def learned_of_index(index: Path, entries: Callable[[], Iterable[CdxjEntry]]) -> dict[str, list[str]]:
    """The names learned volatile from an index without ``volatile.json``: from the cache when it
    holds this version of the index, else learned now (streamed from the file; from ``entries()``
    when the index is not a file on this machine) and, for a large index, kept for the next open."""
    index = Path(index)
    identity = _identity(index) if index.is_file() else None
    cache = learned_file(index) if identity is not None else None
    if identity is None or cache is None:
        return learn_from_index(entries())
    found = _load(cache, identity)
    if found is not None:
        return found
    learned = learn_index_file(index)
    keep_learned(index, identity, learned)
    return learned
