"""Archived pages for judges that check cited URLs: never the live web.

A :class:`PageSource` answers ``get_text(url)`` with the visible text of the
archived page, or None when the page is not archived. :class:`SnapshotPages`
reads snapshot folders (the live run's own ``snapshot/`` and the frozen
snapshot a trajectory names) through ``ego2web_replay.snapshots``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urldefrag

from ..errors import JudgeError
from ..web import html_to_text

__all__ = ["PageSource", "DictPages", "SnapshotPages", "ChainPages", "html_to_text", "normalize_url"]


@runtime_checkable
class PageSource(Protocol):
    def get_text(self, url: str) -> str | None:
        """Visible text of the archived page at ``url``; None if not archived."""
        ...


def normalize_url(url: str) -> str:
    """Drop the fragment and a trailing slash, lower-case scheme and host."""
    url, _ = urldefrag(url.strip())
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]*)(.*)$", url)
    if m:
        url = f"{m.group(1).lower()}://{m.group(2).lower()}{m.group(3)}"
    return url[:-1] if url.endswith("/") else url


class DictPages:
    """Pages from a mapping of URL to text or HTML (HTML is converted to text)."""

    def __init__(self, pages: Mapping[str, str]) -> None:
        self.pages = {normalize_url(u): t for u, t in pages.items()}

    def get_text(self, url: str) -> str | None:
        text = self.pages.get(normalize_url(url))
        if text is None:
            return None
        return html_to_text(text) if "<" in text and ">" in text else text


class ChainPages:
    """The first source that has the page wins."""

    def __init__(self, sources: Iterable[PageSource]) -> None:
        self.sources = list(sources)

    def get_text(self, url: str) -> str | None:
        for source in self.sources:
            text = source.get_text(url)
            if text is not None:
                return text
        return None


def _decode_body(payload: bytes, headers: list[tuple[str, str]]) -> str:
    from ..web import decode_body

    h = {k.lower(): v for k, v in headers}
    decoded = decode_body(payload, h.get("content-encoding"))
    if decoded is None:
        raise JudgeError(f"archived page body: cannot undo Content-Encoding {h.get('content-encoding')!r}")
    m = re.search(r"charset=([\w.-]+)", h.get("content-type", ""), re.I)
    charset = m.group(1) if m else "utf-8"
    try:
        return decoded.decode(charset, errors="replace")
    except LookupError:
        return decoded.decode("utf-8", errors="replace")


def _served(snap: Any, entry: Any) -> tuple[str, int]:
    """Media type and status an entry is served with; a revisit (indexed as ``warc/revisit``, no
    status: a page stored once per recording, seen again, maybe under another URL) as its response's."""
    mime, status = getattr(entry, "mime", "") or "", getattr(entry, "status", 0) or 0
    if getattr(entry, "record_type", "response") == "revisit":
        try:
            record = snap.resolve(entry)
        except Exception:  # noqa: BLE001 - an unresolvable revisit is no page
            return mime.lower(), 0
        mime = (record.http_header("Content-Type") or "").split(";", 1)[0].strip() or mime
        status = record.http_status or 0
    return mime.lower(), int(status)


class SnapshotPages:
    """Archived HTML and text pages of snapshot folders, by URL."""

    def __init__(self, snapshot_dirs: Iterable[str | Path]) -> None:
        # folders, or URLs of snapshots on object storage (kept as strings)
        self.dirs: list[Path | str] = [d if isinstance(d, str) and "://" in d else Path(d) for d in snapshot_dirs]
        self._entries: dict[str, tuple[Any, Any]] | None = None
        self._texts: dict[str, str | None] = {}

    def _load(self) -> dict[str, tuple[Any, Any]]:
        if self._entries is not None:
            return self._entries
        try:
            from ..snapshots.snapshot import Snapshot  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise JudgeError("archived pages cannot be read: ego2web_replay.snapshots is not installed") from None
        entries: dict[str, tuple[Any, Any]] = {}
        for d in self.dirs:
            if isinstance(d, str):
                from ..snapshots.location import open_snapshot

                snap = open_snapshot(d)
            elif not d.is_dir():
                raise JudgeError(f"{d}: snapshot folder not found; the episode's archived pages are missing")
            else:
                snap = Snapshot.open(d)
            for entry in snap.entries():
                mime, status = _served(snap, entry)
                if not ("html" in mime or mime.startswith("text/")) or not 200 <= status < 300:
                    continue
                entries.setdefault(normalize_url(entry.url), (snap, entry))
        self._entries = entries
        return entries

    def get_text(self, url: str) -> str | None:
        key = normalize_url(url)
        if key in self._texts:
            return self._texts[key]
        found = self._load().get(key)
        text = None
        if found is not None:
            snap, entry = found
            record = snap.resolve(entry)
            body = _decode_body(record.payload, list(record.http_headers))
            text = html_to_text(body) if "html" in (entry.mime or "").lower() else body
        self._texts[key] = text
        return text
