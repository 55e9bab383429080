"""The pages judges read: as the agent's browser rendered them, else archived; never the live web.

A :class:`PageSource` answers ``get_text(url)`` with the visible text of the
archived page, or None when the page is not archived. :class:`SnapshotPages`
reads snapshot folders (the live run's own ``snapshot/`` and the frozen
snapshot a trajectory names) through ``ego2web_replay.snapshots``.

:class:`EpisodePages` is what page-reading checks use: the text of a page as
the episode rendered it (``pages/step-NNN.json``, kept after every step, so a
value a script wrote into the page is there), and the archived text only for
a page the episode never rendered, saying which it read and why
(:class:`PageText`). An archived HTML body is the page as served: what
scripts write into it later (prices, stock, search results) is not in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urldefrag

from ..errors import JudgeError
from ..web import html_to_text

__all__ = ["PageSource", "DictPages", "SnapshotPages", "ChainPages", "EpisodePages", "PageText", "html_to_text",
           "normalize_url"]


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


@dataclass(frozen=True)
class PageText:
    """The text a check read of one page, and where it came from."""

    url: str
    text: str
    origin: Literal["rendered", "archived"]
    note: str  # "rendered after step 3"; "archived: the agent never opened it"; ...


class EpisodePages:
    """One episode's pages as judges read them: rendered when the episode rendered the page, else archived.

    ``renders`` are ``(step, url, text)`` in step order (:meth:`Episode.renders`); ``archive`` is read only
    for a URL with no render; ``opened`` are the URLs the agent's steps ended on, so a fallback can say
    whether the agent never opened the page or opened it without a kept render (an older episode).
    """

    def __init__(self, renders: Iterable[tuple[int, str, str]], archive: PageSource | None,
                 opened: Iterable[str] = ()) -> None:
        self.renders: dict[str, list[tuple[int, str]]] = {}
        for step, url, text in renders:
            self.renders.setdefault(normalize_url(url), []).append((step, text))
        self.archive = archive
        self.opened = {normalize_url(u) for u in opened if u}

    def read_all(self, url: str) -> list[PageText]:
        """Every distinct render of the page (in step order), else its archived text; [] when neither."""
        got = self.renders.get(normalize_url(url))
        if got:
            seen: set[str] = set()
            out = []
            for step, text in got:
                if text not in seen:
                    seen.add(text)
                    out.append(PageText(url, text, "rendered", f"rendered after step {step}"))
            return out
        archived = self.archive.get_text(url) if self.archive is not None else None
        if archived is None:
            return []
        why = ("the agent opened it, but the episode kept no rendered text of it" if normalize_url(url) in self.opened
               else "the agent never opened it")
        return [PageText(url, archived, "archived", f"archived: {why}")]

    def read(self, url: str) -> PageText | None:
        """The page as last rendered by the episode, else archived; None when neither."""
        found = self.read_all(url)
        if not found:
            return None
        if found[0].origin == "archived":
            return found[0]
        step, text = self.renders[normalize_url(url)][-1]
        return PageText(url, text, "rendered", f"rendered after step {step}")

    def get_text(self, url: str) -> str | None:
        found = self.read(url)
        return found.text if found is not None else None


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
