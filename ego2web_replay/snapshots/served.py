"""What an index entry serves: a revisit described by the response it replays.

The CDXJ convention (pywb, cdxj-indexer) gives a revisit the media type ``warc/revisit`` and no
status, so code that picks captures by media type or status (archived pages for the judge, drift
probes) would pass over every revisit. A recording stores a repeated payload once and later
captures as revisits (:class:`~.warc.ArchiveWriter`), including another URL with the same bytes (a
page under a tracking parameter), so those captures must count as what they serve.
"""

from __future__ import annotations

from dataclasses import replace

from .cdxj import IndexEntry

__all__ = ["served_entry"]


def served_entry(snap: object, entry: IndexEntry) -> IndexEntry:
    """``entry``, or for a revisit the same entry with the media type and HTTP status it is served with
    (its own HTTP head, else its original's); ``snap`` is the :class:`~.snapshot.Snapshot` holding it."""
    if entry.record_type != "revisit":
        return entry
    try:
        record = snap.resolve(entry)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an unresolvable revisit stays as the index describes it
        return entry
    mime = (record.http_header("Content-Type") or "").split(";", 1)[0].strip() or entry.mime
    return replace(entry, mime=mime, status=record.http_status)
