"""Volatility learned at record time: parameters whose value changed while the response did not.

A page that sends a per-request token (``/api/stock?tok=8f3a...``) cannot be
matched by rules nobody wrote for it. The recording itself holds the evidence:
when two captures of the same method and path (scheme, host, port, path) got
the very same response body (equal payload digests) although a query parameter
or body field had another value, that name did not choose the content. Such a
name is *learned volatile* for that path, unless the same recording also shows
it mattering: captures of that path that differ only in learned names but got
different responses cancel those names again.

A recording may add *reloads*: the requests of a second load of each recorded
document in a throw-away browser context at record time (``record
--second-load``), with the digests of the responses they got. They are never
served; they only take part in learning, as captures of their paths would, so a
value the page makes up anew on every load (a request id) is learned from one
recording.

The result is stored in the snapshot folder as ``volatile.json``
(``{"version": 1, "paths": {"GET https://host/path": ["tok"]}, "reloads":
[[method, url, body query or null, payload digest], ...]}``) when the snapshot
is written or re-indexed (re-indexing keeps the reloads and learns again);
replay drops learned names for their path only (see ``docs/matching.md``).
Names are compared decoded (``unquote_plus``); body fields are read from the
index's POST form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from urllib.parse import unquote_plus

from ..atomic import atomic_write_text
from .cdxj import CdxjEntry
from .digests import normalize_digest, sha1_digest
from .postform import post_query

__all__ = ["VOLATILE_FILE", "Reload", "path_group", "learn_volatile", "learn_grouped", "learn_from_index", "volatile_text",
           "write_volatile", "read_volatile", "read_reloads", "merge_volatile", "reload_of", "LEARNS"]

VOLATILE_FILE = "volatile.json"
_VERSION = 1
LEARNS = [0]  # times this process ran the learner (read by tests: a cached open runs none)

Fields = dict[str, tuple[str, ...]]
Reload = tuple[str, str, str | None, str]
"""One request of a record-time second load: (method, URL, body in the index's POST form, payload digest)."""


def reload_of(method: str, url: str, content_type: str | None, body: bytes, payload: bytes) -> Reload:
    """A second-load request as the index would write it: its body in the POST form, its payload's digest."""
    method = method.upper()
    form = post_query(method, content_type, body).partition("&")[2] or None if method != "GET" else None
    return (method, url, form, normalize_digest(sha1_digest(payload)))


def path_group(method: str, url: str) -> str:
    """``METHOD scheme://host[:port]/path``: the captures whose volatility is learned together."""
    base = url.partition("#")[0].partition("?")[0]
    scheme, sep, rest = base.partition("://")
    if not sep:
        return f"{method.upper()} {base}"
    authority, slash, path = rest.partition("/")
    return f"{method.upper()} {scheme.lower()}://{authority.lower()}/{path if slash else ''}"


def _fields(url: str, body_query: str | None) -> Fields:
    found: dict[str, list[str]] = {}
    query = url.partition("#")[0].partition("?")[2]
    for text in (query, body_query or ""):
        for item in text.split("&"):
            if item:
                name, _, value = item.partition("=")
                found.setdefault(unquote_plus(name), []).append(unquote_plus(value))
    return {name: tuple(values) for name, values in found.items()}


def _varying(members: list[Fields]) -> set[str]:
    """Names present in every member whose values are not all the same."""
    common = set(members[0]).intersection(*members[1:])
    return {name for name in common if len({m[name] for m in members}) > 1}


def _without(fields: Fields, names: set[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((k, v) for k, v in fields.items() if k not in names))


def _learn_group(captures: list[tuple[Fields, str]]) -> set[str]:
    by_digest: dict[str, list[Fields]] = {}
    for fields, digest in captures:
        by_digest.setdefault(digest, []).append(fields)
    learned: set[str] = set()
    for members in by_digest.values():
        if len(members) > 1:
            learned |= _varying(members)
    while learned:  # names that made a difference in this recording are not volatile
        rest: dict[tuple[tuple[str, tuple[str, ...]], ...], list[tuple[Fields, str]]] = {}
        for fields, digest in captures:
            rest.setdefault(_without(fields, learned), []).append((fields, digest))
        meaningful: set[str] = set()
        for same in rest.values():
            if len({digest for _, digest in same}) > 1:
                meaningful |= {n for n in learned if len({f.get(n) for f, _ in same}) > 1}
        if not meaningful:
            break
        learned -= meaningful
    return learned


def learn_volatile(captures: Iterable[tuple[str, str, str | None, str]]) -> dict[str, list[str]]:
    """Learned volatile names per path group from ``(method, url, body query, payload digest)``.

    Only paths with at least two captures can teach anything; revisits count
    with the digest of the payload they refer to.
    """
    groups: dict[str, list[tuple[Fields, str]]] = {}
    for method, url, body_query, digest in captures:
        if "?" not in url and not body_query:
            continue
        groups.setdefault(path_group(method, url), []).append((_fields(url, body_query), digest))
    return _learn_groups(groups.items())


def learn_grouped(captures: Iterable[tuple[str, str, str | None, str]]) -> dict[str, list[str]]:
    """:func:`learn_volatile` of ``(path group, url, body query, payload digest)`` of the captures that
    have a query or a body, coming grouped (those of one :func:`path_group` one after the other): one
    group is held at a time, and a group of one capture is never parsed."""
    def groups() -> Iterable[tuple[str, list[tuple[Fields, str]]]]:
        for group, members in groupby(captures, key=itemgetter(0)):
            listed = list(members)
            if len(listed) > 1:
                yield group, [(_fields(url, body), digest) for _, url, body, digest in listed]

    return _learn_groups(groups())


def _learn_groups(groups: Iterable[tuple[str, list[tuple[Fields, str]]]]) -> dict[str, list[str]]:
    LEARNS[0] += 1
    learned: dict[str, list[str]] = {}
    for group, members in groups:
        if len(members) > 1:
            names = _learn_group(members)
            if names:
                learned[group] = sorted(names)
    return dict(sorted(learned.items()))


def learn_from_index(entries: Iterable[CdxjEntry], reloads: Iterable[Reload] = ()) -> dict[str, list[str]]:
    """:func:`learn_volatile` over the servable entries of a CDXJ index and a recording's ``reloads``."""
    captures = [(e.method, e.url, e.request_body_query, e.digest) for e in entries
                if e.record_type in ("response", "revisit")]
    return learn_volatile([*captures, *reloads])


def volatile_text(learned: Mapping[str, list[str]], reloads: Sequence[Reload] = ()) -> bytes:
    """The bytes of ``volatile.json`` (``reloads`` kept only when there are any)."""
    data: dict[str, object] = {"version": _VERSION, "paths": dict(learned)}
    if reloads:
        data["reloads"] = [list(r) for r in reloads]
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def write_volatile(folder: Path, learned: Mapping[str, list[str]], reloads: Sequence[Reload] = ()) -> Path:
    """Write ``volatile.json`` into a snapshot folder (atomically)."""
    path = Path(folder) / VOLATILE_FILE
    atomic_write_text(path, volatile_text(learned, reloads).decode("utf-8"))
    return path


def read_reloads(folder: Path) -> list[Reload]:
    """The record-time reloads kept in a snapshot folder's ``volatile.json`` (empty when none)."""
    try:
        rows = json.loads((Path(folder) / VOLATILE_FILE).read_text("utf-8")).get("reloads", [])
        return [(str(m), str(u), None if b is None else str(b), str(d)) for m, u, b, d in rows]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def read_volatile(folder: Path) -> dict[str, list[str]]:
    """The learned names of a snapshot folder (empty when it has no readable ``volatile.json``)."""
    try:
        data = json.loads((Path(folder) / VOLATILE_FILE).read_text("utf-8"))
        paths = data.get("paths", {})
        return {str(k): [str(n) for n in v] for k, v in paths.items() if isinstance(v, list)}
    except (OSError, ValueError, AttributeError):
        return {}


def merge_volatile(*learned: Mapping[str, list[str]]) -> dict[str, frozenset[str]]:
    """The union of several snapshots' learned names, per path group."""
    out: dict[str, set[str]] = {}
    for one in learned:
        for group, names in one.items():
            out.setdefault(group, set()).update(names)
    return {group: frozenset(names) for group, names in out.items()}
