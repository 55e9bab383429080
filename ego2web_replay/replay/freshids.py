"""Fresh ids: values a page makes up anew on every load, recognised by their shape in one recording.

An analytics, GraphQL or tracing client sends a new client id, request id or
trace id with every request (``crypto.randomUUID()``, ``Date.now()``, a GA
``cid``); no two loads of the page send the same, so a recording with one
capture of such a request cannot teach, by comparing captures
(:mod:`ego2web_replay.snapshots.volatility`), that the value does not matter.
Its shape can: a value is a *fresh id* when it is

* a UUID (``8-4-4-4-12`` hex digits);
* a hex token of 16 or more digits holding both digits and letters;
* a base64 / base64url token of 20 or more characters holding upper case,
  lower case and digits;
* a GA-style client id (``1234567890.1700000000``, ``GA1.1.123.456``);
* an epoch time in the rules' window (10 or 13 digits, optionally ``.fraction``);
* an ISO 8601 date-time (a date with a time of day: ``2026-05-01T10:00:00Z``);

and its name does not choose content: never a ``keep_params`` name; a
``fresh_id_params`` name (``cid``, ``requestId``, ``traceId`` ...) always
may; otherwise any name but a ``content_params`` one (``id``, ``*_id``,
``q``, ``page``, ``sort``, ``*hash*``, ``*token*`` ...), see ``rules.yaml``.

:func:`fresh_key` writes a request's canonical key with each fresh id's value
replaced by its shape (``{uuid}``, ``{hex32}``, ``{b64-22}``, ``{ga-cid}``,
``{epoch13}``). Two requests with one fresh key are the same request but for
their fresh ids: same method, URL path, every other parameter and body field
equal, the same names carrying fresh ids, each of the same shape. Replay
tries this key only after the exact, canonical and learned stages missed, and
logs which parameters it ignored (see ``docs/matching.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import unquote_plus

from .canonical import BODY_PREFIX, CanonicalRequest
from .rules import CompiledRules

__all__ = ["FreshKey", "id_shape", "fresh_key", "differing_names", "display_name"]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_HEX = re.compile(r"[0-9a-f]{16,}|[0-9A-F]{16,}")
_B64 = re.compile(r"[A-Za-z0-9_\-+/]{20,}={0,2}")
_GA_CID = re.compile(r"\d{5,10}\.\d{10}")
_GA_COOKIE = re.compile(r"GA\d\.\d\.\d{5,10}\.\d{10}")
_REPEAT = re.compile(r"\.\d+_$")  # the index's suffix of a repeated JSON key (``key.2_``)
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?")
_SHORTEST = 10  # no shape is shorter (an epoch in seconds)


class FreshKey(NamedTuple):
    """A request's fresh key and the (canonical, body-prefixed) names whose values it replaced; ``unlisted``:
    those of them holding a random id (UUID, hex, base64) under a name no ``fresh_id_params`` entry lists, which
    may as well name a thing (``owner``, ``node``, ``workspace``): set aside, but not taken as surely fresh."""

    key: str
    names: tuple[str, ...]
    unlisted: tuple[str, ...] = ()


def _epochish(value: str, rules: CompiledRules) -> bool:
    head, dot, tail = value.partition(".")
    return rules.is_epoch(head) and (not dot or tail.isdigit())


def id_shape(value: str, rules: CompiledRules) -> str | None:
    """The shape of a fresh-id value (``uuid``, ``hex<n>``, ``b64-<n>``, ``ga-cid``, ``epoch<n>``, ``datetime``:
    an ISO 8601 date with a time of day), else None."""
    if len(value) < _SHORTEST:
        return None
    if "%" in value:
        value = unquote_plus(value)
    n = len(value)
    if value[:4].isdigit() and value[4:5] == "-" and _DATETIME.fullmatch(value):
        return "datetime"
    if value.isdigit() or (value[0].isdigit() and "." in value):
        if _epochish(value, rules):
            return f"epoch{len(value.partition('.')[0])}"
        return "ga-cid" if _GA_CID.fullmatch(value) else None
    if n == 36 and _UUID.fullmatch(value):
        return "uuid"
    if _HEX.fullmatch(value):
        return f"hex{n}" if not value.isalpha() else None
    if _GA_COOKIE.fullmatch(value):
        return "ga-cid"
    if _B64.fullmatch(value) and _mixed(value):
        return f"b64-{n}"
    return None


def _mixed(value: str) -> bool:
    """Upper case, lower case and digits all present (a random token, not a word or a number)."""
    return (any(c.isupper() for c in value) and any(c.islower() for c in value)
            and any(c.isdigit() for c in value))


def _lname(name: str) -> str:
    """The plain lower-cased name of a canonical pair name (body prefix, escapes and repeat suffix off)."""
    return _REPEAT.sub("", unquote_plus(name.removeprefix(BODY_PREFIX))).lower()


def display_name(name: str) -> str:
    """A canonical pair name as the replay log shows it: ``cid``, ``body:requestId``."""
    plain = _REPEAT.sub("", unquote_plus(name.removeprefix(BODY_PREFIX)))
    return "body:" + plain if name.startswith(BODY_PREFIX) else plain


def fresh_key(canon: CanonicalRequest, rules: CompiledRules) -> FreshKey | None:
    """The request's key with its fresh ids' values replaced by their shapes; None when it has none."""
    if not rules.fresh_ids:
        return None
    pairs: list[tuple[str, str]] | None = None
    names: list[str] = []
    unlisted: list[str] = []
    memo = rules.fresh_memo
    for i, (name, value) in enumerate(canon.pairs):
        if len(value) < _SHORTEST:
            continue
        ok = memo.get(name)
        if ok is None:
            ok = rules.fresh_id_name(_lname(name))
            if len(memo) < 100_000:  # names are few; a body with many keys cannot grow it without bound
                memo[name] = ok
        if not ok:
            continue
        shape = id_shape(value, rules)
        if shape is None:
            continue
        if pairs is None:
            pairs = list(canon.pairs)
        pairs[i] = (name, "{" + shape + "}")  # never a canonical value: those have braces %-escaped
        names.append(name)
        if shape.startswith(_RANDOM_SHAPES) and not rules.fresh_listed(_lname(name)):
            unlisted.append(name)
    if pairs is None:
        return None
    pairs.sort()
    return FreshKey(canon.group + "?" + "&".join(k + "=" + v for k, v in pairs), tuple(dict.fromkeys(names)),
                    tuple(dict.fromkeys(unlisted)))


#: the shapes of random ids (what an entity's key may be too), as against times and GA client ids
_RANDOM_SHAPES = ("uuid", "hex", "b64")


def differing_names(names: Iterable[str], mine: list[tuple[str, str]], theirs: list[tuple[str, str]]) -> list[str]:
    """Of the fresh-id ``names``, those whose values differ between two requests' pairs, for display."""
    out = []
    for name in names:
        if sorted(v for k, v in mine if k == name) != sorted(v for k, v in theirs if k == name):
            out.append(display_name(name))
    return out
