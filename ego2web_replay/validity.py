"""Episode validity: did the agent see only recorded pages?

Every frozen episode is classified from its replay log:

* ``complete``: no miss and no nearest-capture (``fuzzy``); answers from another task's snapshot
  of the same root (``shared``: a recorded response of the same request, from the same suite's
  recording within the share window) keep it complete, and are counted and shown apart
  (``ReplayStats.shared``, ``shared_from``, log outcome ``shared``);
* ``degraded``: misses only on subresources that do not carry the page's
  content: images, fonts, style sheets, media, favicons, analytics and beacons;
  or an answer from a capture cut short while recording (``WARC-Truncated``: the
  page got the recorded bytes, but the live response went on past them);
  or an answer past a recorded series whose answers changed (a page polling a
  URL, or a websocket message sent, more often than while recording: the last
  recorded answer is served again, though the live one had been changing; the
  log entry's ``volatile`` says ``again: past N recorded``, counted ``again``);
* ``off-snapshot``: a document (page or frame), a script, a fetch/XHR or a
  websocket whose response the page may render was missed, answered by the
  nearest capture, or forwarded to the live web.

A websocket handshake the replay refused (``websocket``: no recorded
conversation) and a websocket message no recorded one answers (``miss``, method
``WS``) count like a miss of the handshake's kind: content, unless the URL is an
analytics beacon.

An answer that set volatile values aside (names learned volatile at record
time, or fresh random ids recognised by shape) is the recorded response of the
same request and keeps an episode ``complete``, but for a random id (UUID, hex,
base64) set aside under a name no fresh-id rule lists (logged ``body:owner?``):
it may name a thing (an owner, a node), so the episode is at best ``degraded``; :func:`set_aside` lists them
per reason and parameter (``fresh-id: cid, rid``) so that the episode's
validity is shown with them.

What a request was for comes from the browser's ``Sec-Fetch-Dest`` header
(kept on each log entry as ``kind``); for clients that do not send it, from
``Accept`` and the URL's extension.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

__all__ = ["AGAIN", "Validity", "VALIDITIES", "again_note", "request_kind", "classify", "is_content",
           "episode_validity", "set_aside"]

Validity = Literal["complete", "degraded", "off-snapshot"]
VALIDITIES: tuple[Validity, ...] = ("complete", "degraded", "off-snapshot")

#: how a log entry's ``volatile`` marks an answer past a recorded series whose answers changed
AGAIN = "again:"


def again_note(recorded: int, why: str = "answers differ") -> str:
    """The ``volatile`` note of an answer past a series of ``recorded`` answers: they differ, or it is a write
    (``why``: ``a write``)."""
    return f"{AGAIN} past {recorded} recorded, {why}"


_DOCUMENT_DESTS = {"document", "iframe", "frame", "embed", "object", "fencedframe"}
_CONTENT_DESTS = {"script", "worker", "sharedworker", "serviceworker", "empty", "json", "xslt", "websocket"}
_SUBRESOURCE_EXT = re.compile(
    r"\.(png|jpe?g|gif|webp|avif|svg|ico|bmp|woff2?|ttf|otf|eot|css|mp4|webm|mp3|ogg|wav|m4a|vtt|map)$", re.I)
_BEACON = re.compile(
    r"google-analytics|googletagmanager|doubleclick|/gtag/|/collect\b|/beacon|/track(ing)?\b|/telemetry|"
    r"/metrics\b|/pixel|/ping\b|/gen_204|/log(ging)?\b|/analytics|/rum\b|favicon\.ico", re.I)


def request_kind(dest: str | None, accept: str | None, url: str, mode: str | None = None) -> str:
    """``document``, ``content`` (script, fetch/XHR) or ``subresource`` (everything that is not content)."""
    path = url.partition("#")[0].partition("?")[0]
    dest = (dest or "").lower()
    if dest in _DOCUMENT_DESTS:
        return "document"
    if _BEACON.search(url):
        return "subresource"
    if dest == "empty" and (mode or "").lower() == "no-cors":  # navigator.sendBeacon and no-cors pings
        return "subresource"
    if dest in _CONTENT_DESTS:
        return "content"
    if dest:
        return "subresource"  # image, font, style, audio, video, track, manifest, report ...
    if "text/html" in (accept or "").lower():
        return "document"
    return "subresource" if _SUBRESOURCE_EXT.search(path) else "content"


def is_content(kind: str | None, url: str) -> bool:
    """Whether a missed request of this kind takes the episode off the snapshot."""
    if kind is None:  # an entry written before kinds were logged
        kind = request_kind(None, None, url)
    return kind in ("document", "content")


def classify(entries: Iterable[object], truncated: int = 0, again: int = 0) -> Validity:
    """The validity of a replay from its log entries (``outcome``, ``url`` and ``kind`` attributes) and
    the number of its answers that came from truncated captures, or past a changing series (``again``:
    counted whole, where the log may be capped)."""
    degraded = truncated > 0 or again > 0
    for e in entries:
        outcome = getattr(e, "outcome", None)
        volatile = getattr(e, "volatile", None) or ""
        # (an answer recorded for other request fields, Vary: another variant of the page, as fuzzy is)
        if outcome not in ("miss", "fuzzy", "live", "websocket") and "vary:" not in volatile:
            if AGAIN in volatile or _unsure(volatile):  # a recorded answer, though perhaps not this request's
                degraded = True
            continue
        if is_content(getattr(e, "kind", None), str(getattr(e, "url", ""))):
            return "off-snapshot"
        degraded = True
    return "degraded" if degraded else "complete"


def _unsure(volatile: str) -> bool:
    """Whether a fresh-id answer set aside a random id under a name no fresh-id rule lists (``body:owner?``)."""
    head = volatile.partition(";")[0]
    return head.startswith("fresh-id:") and any(n.strip().endswith("?") for n in head[9:].split(","))


def episode_validity(traj: object) -> str | None:
    """A frozen trajectory's validity (from its replay stats, or classified from its log); None for live."""
    if getattr(traj, "mode", None) != "frozen":
        return None
    stats = getattr(traj, "replay", None)
    if stats is None:
        return None
    return getattr(stats, "validity", None) or classify(getattr(stats, "log", []), getattr(stats, "truncated", 0),
                                                        getattr(stats, "again", 0))


def set_aside(entries: Iterable[object]) -> dict[str, int]:
    """How many answers set which volatile values aside, from log entries' ``volatile``
    (``{"fresh-id: cid, rid": 2, "learned: tok": 1}``), sorted by reason and parameters."""
    counts: dict[str, int] = {}
    for e in entries:
        why = getattr(e, "volatile", None)
        if why:
            counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items()))
