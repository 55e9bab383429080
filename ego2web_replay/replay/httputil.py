"""HTTP details of serving archived responses: pure functions the replay proxy calls.

Headers are lists of ``(name, value)`` pairs (order and duplicates kept, names
compared case-insensitively); request headers may also be any mapping. A
response is ``(status, reason, headers, body)``.

* :func:`clean_response_headers` drops hop-by-hop headers;
* :func:`apply_range` cuts a ``Range`` from one stored 200 (replay answers ranges from a URL's
  whole byte map instead, :mod:`.ranges`);
* :func:`conditional` / :func:`not_modified_response` answer revalidations with 304;
* :func:`preflight_response` answers CORS preflights nobody archived;
* :func:`miss_response` is the synthetic answer to a request nothing matched;
* :func:`rewrite_jsonp` renames a JSONP callback to the one the page asked for;
* :func:`decode_body` (from :mod:`ego2web_replay.web`) undoes ``Content-Encoding``;
* :func:`accepts_coding` / :func:`identity_response` serve a client the coding it takes.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..web import RequestHeaders, decode_body, get_header, reason_phrase

__all__ = [
    "HOP_BY_HOP",
    "MISS_HEADER",
    "Headers",
    "Response",
    "accepts_coding",
    "accepts_every_coding",
    "apply_range",
    "clean_response_headers",
    "vary_names",
    "vary_differs",
    "identity_response",
    "conditional",
    "decode_body",
    "get_header",
    "miss_response",
    "not_modified_response",
    "preflight_response",
    "reason_phrase",
    "rewrite_jsonp",
    "shift_dates",
    "date_offsets",
    "dated_value",
    "http_date",
]

Headers = list[tuple[str, str]]
Response = tuple[int, str, Headers, bytes]

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
     "te", "trailer", "transfer-encoding", "upgrade"}
)
MISS_HEADER = "X-Ego2Web-Replay"




_KNOWN_CODINGS = ("gzip", "deflate", "br", "zstd")  # what decode_body undoes


@functools.lru_cache(maxsize=512)
def _accepted(accept_encoding: str | None) -> tuple[dict[str, float], float]:
    """An Accept-Encoding value read (RFC 9110 12.5.3): each coding's weight, and the weight of ``*``
    (0: codings it does not name are not accepted). No header at all is read as identity only: what
    a client sending none (curl, urllib) gets from the live servers, which compress only on request."""
    weights: dict[str, float] = {}
    star = 0.0
    for item in (accept_encoding or "").split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if name == "*":
            star = q
        else:
            weights["gzip" if name == "x-gzip" else name] = q
    return weights, star


def accepts_coding(accept_encoding: str | None, content_encoding: str) -> bool:
    """Whether a request with this Accept-Encoding takes a body of this Content-Encoding (every coding
    in it, ``identity`` always)."""
    weights, star = _accepted(accept_encoding)
    for coding in content_encoding.lower().split(","):
        coding = coding.strip()
        if coding in ("", "identity"):
            continue
        coding = "gzip" if coding == "x-gzip" else coding
        if weights.get(coding, star) <= 0:
            return False
    return True


@functools.lru_cache(maxsize=512)
def accepts_every_coding(accept_encoding: str | None) -> bool:
    """Whether a request takes every coding an archived body may have (a browser's ``gzip, deflate, br,
    zstd``): nothing it is served need be decoded for it."""
    return all(accepts_coding(accept_encoding, c) for c in _KNOWN_CODINGS)


def identity_response(headers: Iterable[tuple[str, str]], body: bytes) -> tuple[Headers, bytes] | None:
    """An archived body with its Content-Encoding undone, for a client that does not take that coding:
    the headers without Content-Encoding, the decoded length (unless it was sent chunked), a strong ETag made weak
    (it named the encoded bytes; RFC 9110 8.8.1). None when the body does not decode."""
    plain = decode_body(body, get_header(headers, "content-encoding"))
    if plain is None:
        return None
    out: Headers = []
    length = True  # the decoded length, where the archived answer had one (not one sent chunked)
    for k, v in headers:
        name = k.lower()
        if name == "transfer-encoding":
            length = False
        if name in ("content-encoding", "content-length", "content-md5", "digest"):
            continue
        if name == "etag" and not v.lstrip().startswith("W/"):
            v = "W/" + v.strip()
        out.append((k, v))
    return (out + [("Content-Length", str(len(plain)))] if length else out), plain


def clean_response_headers(headers: Iterable[tuple[str, str]], keep: Iterable[str] = ()) -> Headers:
    """``headers`` without hop-by-hop ones (RFC 9110 §7.6.1), order and duplicates kept.

    Drops Connection, Keep-Alive, Transfer-Encoding, TE, Trailer, Upgrade,
    every ``Proxy-*`` header and any header the Connection header names, except
    those named in ``keep`` (lower case), which stay where they were.
    """
    headers = list(headers)
    named: set[str] = set()
    for key, value in headers:
        if key.lower() == "connection":
            named.update(token.strip().lower() for token in value.split(",") if token.strip())
    kept = set(keep)
    return [
        (key, value)
        for key, value in headers
        if (lk := key.lower()) in kept
        or (lk not in HOP_BY_HOP and not lk.startswith("proxy-") and lk not in named)
    ]


def _replace(headers: Headers, drop: set[str], add: Headers) -> Headers:
    return [(k, v) for k, v in headers if k.lower() not in drop] + add


_RESLICED = {"content-length", "content-range", "transfer-encoding"}  # a slice is sent with its own length
_RANGE = re.compile(r"\s*(\d*)\s*-\s*(\d*)\s*")


def apply_range(
    status: int, headers: Headers, body: bytes, range_header: str | None, if_range: str | None = None
) -> tuple[int, Headers, bytes]:
    """Serve a ``Range`` request from a stored full response.

    A single range (``bytes=0-99``, open ``bytes=100-``, suffix ``bytes=-100``)
    of a 200 gives a 206 with Content-Range; a range starting past the end gives
    416 with ``Content-Range: bytes */N``. Multi-range requests, malformed
    headers, non-200 statuses and an ``If-Range`` that does not match the
    ETag or Last-Modified get the full response unchanged (RFC 9110 allows a
    server to ignore Range). Slicing applies to the stored (possibly encoded) bytes.
    """
    if status != 200 or not range_header:
        return status, headers, body
    unit, _, spec = range_header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return status, headers, body
    if if_range is not None and if_range.strip() not in (
        (get_header(headers, "etag") or "\0").strip(),
        (get_header(headers, "last-modified") or "\0").strip(),
    ):
        return status, headers, body
    m = _RANGE.fullmatch(spec)
    if m is None or (not m.group(1) and not m.group(2)):
        return status, headers, body
    size = len(body)
    if m.group(1):
        first = int(m.group(1))
        last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        if m.group(2) and int(m.group(2)) < first:
            return status, headers, body  # invalid, ignored
    else:
        suffix = int(m.group(2))
        first, last = max(size - suffix, 0), size - 1
        if suffix == 0:
            first = size
    if first >= size:
        out = _replace(headers, _RESLICED,
                       [("Content-Range", f"bytes */{size}"), ("Content-Length", "0")])
        return 416, out, b""
    part = body[first : last + 1]
    out = _replace(headers, _RESLICED,
                   [("Content-Range", f"bytes {first}-{last}/{size}"), ("Content-Length", str(len(part)))])
    return 206, out, part


def _etags(value: str) -> list[str]:
    return re.findall(r'(?:W/)?"[^"]*"|\*', value)


def _weak_equal(a: str, b: str) -> bool:
    return a.removeprefix("W/") == b.removeprefix("W/")


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None


def conditional(request_headers: RequestHeaders, status: int, headers: Iterable[tuple[str, str]]) -> bool:
    """True when the request's validators say the client's copy is current (answer 304).

    If-None-Match is compared with the archived ETag (weak comparison, ``*``
    matches any); only without If-None-Match is If-Modified-Since compared with
    Last-Modified (not modified when Last-Modified <= If-Modified-Since). Only
    200 responses are ever answered with 304.
    """
    if status != 200:
        return False
    inm = get_header(request_headers, "if-none-match")
    if inm is not None:
        etag = get_header(headers, "etag")
        tags = _etags(inm)
        if "*" in tags:
            return True
        return etag is not None and any(_weak_equal(t, etag.strip()) for t in tags)
    since = _http_date(get_header(request_headers, "if-modified-since"))
    modified = _http_date(get_header(headers, "last-modified"))
    if since is None or modified is None:
        return False
    try:
        return modified <= since
    except TypeError:  # naive vs aware
        return False


_KEEP_ON_304 = {"cache-control", "content-location", "date", "etag", "expires", "vary", "last-modified"}


def not_modified_response(headers: Iterable[tuple[str, str]]) -> Response:
    """A 304 carrying only the validator and caching headers of the archived response."""
    kept = [(k, v) for k, v in headers if k.lower() in _KEEP_ON_304]
    return 304, reason_phrase(304), kept, b""


def preflight_response(request_headers: RequestHeaders, archived: Response | None = None) -> Response:
    """The answer to an OPTIONS request: the archived one if any, else a permissive CORS preflight.

    The synthetic answer is a 204 echoing Origin, the requested method and
    headers, allowing credentials (and a private-network request when asked),
    so that frozen pages make the same follow-up requests as live ones.
    """
    if archived is not None:
        return archived
    origin = get_header(request_headers, "origin")
    method = get_header(request_headers, "access-control-request-method")
    wanted = get_header(request_headers, "access-control-request-headers")
    headers: Headers = [
        ("Access-Control-Allow-Origin", origin or "*"),
        ("Access-Control-Allow-Methods", method or "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ]
    if wanted:
        headers.append(("Access-Control-Allow-Headers", wanted))
    if origin:
        headers.append(("Access-Control-Allow-Credentials", "true"))
    if (get_header(request_headers, "access-control-request-private-network") or "").lower() == "true":
        headers.append(("Access-Control-Allow-Private-Network", "true"))
    headers += [("Access-Control-Max-Age", "600"), ("Vary", "Origin"), ("Content-Length", "0"),
                (MISS_HEADER, "preflight")]
    return 204, reason_phrase(204), headers, b""


def miss_response(url: str, method: str = "GET", status: int = 404) -> Response:
    """The synthetic answer to a request nothing in the snapshot matched.

    Carries ``X-Ego2Web-Replay: miss`` and ``Cache-Control: no-store`` (a
    browser must not cache the miss), and a short HTML page naming the request.
    """
    text = (
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Not in snapshot</title></head>"
        f"<body><h1>Not in snapshot</h1><p>ego2web-replay has no archived response for "
        f"<code>{html.escape(method.upper())} {html.escape(url)}</code>. The replay is hermetic, "
        "so nothing was fetched from the live web.</p></body></html>\n"
    )
    body = text.encode("utf-8")
    headers: Headers = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("Access-Control-Allow-Origin", "*"),
        (MISS_HEADER, "miss"),
    ]
    return status, reason_phrase(status), headers, body


_CALLBACK_NAMES = ("callback", "jsonp", "jsoncallback", "jsonpcallback")
_JS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*")


def _callback(url: str, names: tuple[str, ...]) -> tuple[str, str] | None:
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if key.lower() in names and _JS_NAME.fullmatch(value):
            return key.lower(), value
    return None


def rewrite_jsonp(body: bytes, archived_url: str, request_url: str,
                  names: tuple[str, ...] = _CALLBACK_NAMES) -> bytes:
    """Rename the JSONP callback in an archived (identity-encoded) body.

    Matching ignores callback values, so a replayed page may ask for
    ``callback=jQuery_2`` and be served the body recorded for ``jQuery_1``;
    this renames the call at the head of the body (after whitespace or a
    ``/**/`` comment) so the page's own function runs. Bodies that do not start
    with a call of the archived name come back unchanged.
    """
    old = _callback(archived_url, names)
    new = _callback(request_url, names)
    if old is None or new is None or old[0] != new[0] or old[1] == new[1]:
        return body
    m = re.match(rb"(\s*(?:/\*\*/)?\s*(?:typeof\s+[\w$.]+\s*===?\s*['\"]function['\"]\s*&&\s*)?)" +
                 re.escape(old[1].encode()) + rb"(\s*\()", body)
    if m is None:
        return body
    return m.group(1) + new[1].encode() + m.group(2) + body[m.end():]


_DATED = ("expires", "last-modified")
_ZERO = timedelta(0)
_FAR = timedelta(days=365 * 200)  # a date this far from the response's (year 9999, 1970) stays as it is
#: a Set-Cookie's Expires attribute: what comes before its date, the date, what comes after
_COOKIE_EXPIRES = re.compile(r"(?i)(.*?;\s*expires\s*=\s*)([^;]*?)(\s*(?:;.*)?)$")
_DASHED = re.compile(r"(\d{1,2})-([A-Za-z]{3})-(\d{2,4})")  # the Netscape form: 04-Dec-2027

#: where a header's date goes: ``now`` plus the offset (the whole value), or, for a Set-Cookie, the
#: text before its Expires date, the offset, and the text after
Offset = timedelta | tuple[str, timedelta, str]


def shift_dates(headers: Headers, now: datetime) -> Headers:
    """``Date`` set to ``now`` and ``Expires``/``Last-Modified`` moved by the same amount, and so is the
    ``Expires`` attribute of each ``Set-Cookie``.

    A browser judges freshness against its real clock; served with the archived
    dates, a file fresh for an hour at capture would be stale (and revalidated)
    a day later. Shifted together, every lifetime (Expires - Date, the
    Last-Modified heuristic) is what the live browser saw. A cookie set for half an
    hour (a session, a consent choice for a year) would be expired on arrival a day
    (a year) later and dropped, so the page would behave as for a new visitor;
    moved, it lives as long as it did live. No header is added;
    a response without a parseable ``Date`` is left as it is.
    """
    offsets = date_offsets(headers)
    if offsets is None:
        return headers
    return [(k, v) if off is None else (k, dated_value(off, now)) for (k, v), off in zip(headers, offsets, strict=True)]


def dated_value(offset: Offset, now: datetime) -> str:
    """A header's value with its date moved to ``now`` plus the offset (see :data:`Offset`)."""
    if isinstance(offset, tuple):
        before, delta, after = offset
        return before + http_date(now + delta) + after
    return http_date(now + offset)


def date_offsets(headers: Sequence[tuple[str, str]]) -> tuple[Offset | None, ...] | None:
    """For each header, where :func:`shift_dates` puts it: ``now`` plus this offset (zero for ``Date``,
    the archived distance from ``Date`` for ``Expires``/``Last-Modified`` and a Set-Cookie's Expires),
    or None for a header left as it is; None for a response without a parseable ``Date``. Worked out
    once for a response, it makes moving its dates to any later ``now`` a matter of formatting (see
    ``Responder``)."""
    then = _aware(_http_date(get_header(headers, "date")))
    if then is None:
        return None
    out: list[Offset | None] = []
    for key, value in headers:
        lk = key.lower()
        if lk == "date":
            out.append(_ZERO)
        elif lk in _DATED:
            moved = _aware(_http_date(value))
            out.append(None if moved is None or abs(moved - then) > _FAR else moved - then)
        elif lk == "set-cookie":
            out.append(_cookie_offset(value, then))
        else:
            out.append(None)
    return tuple(out)


def _cookie_offset(value: str, then: datetime) -> tuple[str, timedelta, str] | None:
    """A Set-Cookie's Expires as an :data:`Offset` from the response's ``Date``; None without one, or
    with a date that does not read (RFC 6265 5.2.1 has the client ignore such an attribute too)."""
    if "xpires" not in value and "XPIRES" not in value:
        return None
    m = _COOKIE_EXPIRES.match(value)
    if m is None:
        return None
    when = _aware(_http_date(_DASHED.sub(r"\1 \2 \3", m.group(2))))
    return None if when is None or abs(when - then) > _FAR else (m.group(1), when - then, m.group(3))


def http_date(when: datetime) -> str:
    """``when`` as an HTTP date (``Tue, 01 Dec 2026 09:00:00 GMT``)."""
    return format_datetime(when.astimezone(UTC), usegmt=True)


def _aware(when: datetime | None) -> datetime | None:
    return when if when is None or when.tzinfo else when.replace(tzinfo=UTC)


#: ``Vary`` names the replay handles elsewhere: the coding (served decoded where the client takes none) and
#: the origin (a CORS answer names its page), so not compared here
_VARY_HANDLED = frozenset({"accept-encoding", "origin"})


def vary_names(headers: Iterable[tuple[str, str]], status: int | None = None) -> tuple[str, ...]:
    """The request fields a response says it was chosen by (``Vary``, RFC 9110 12.5.5), lower case, but for
    those handled elsewhere and ``*`` (chosen by what no field says: nothing to compare)."""
    names: list[str] = []
    event_stream = False
    for k, v in headers:
        if k.lower() == "vary":
            for name in v.split(","):
                name = name.strip().lower()
                if name and name != "*" and name not in _VARY_HANDLED and name not in names:
                    names.append(name)
        elif k.lower() == "content-type" and v.partition(";")[0].strip().lower() == "text/event-stream":
            event_stream = True
    if (event_stream or status == 204) and "last-event-id" not in names:
        # server-sent events: the client's Last-Event-ID says where the stream resumes (HTML, 9.2.4), so it
        # chooses the answer whether or not the server says Vary: a reload (none) must not get a resumed stream,
        # nor a resume the 204 that ended the events (a 204 is how a server tells EventSource to stop)
        names.append("last-event-id")
    return tuple(names)


#: cookies analytics and ad scripts set on every page, whenever they run: which of them a browser holds says
#: nothing of what a site chose its answer by (a session, a login, a preference)
_TRACKING_COOKIES = ("_ga", "_gid", "_gat", "_gcl", "_fbp", "_fbc", "__utm", "_hj", "ajs_", "amplitude", "amp_",
                     "mp_", "_uet", "_clck", "_clsk", "_pk_", "_ttp", "__gads", "__gpi", "_scid", "_rdt", "optimizely")


_UA_TOOL = re.compile(r"^(curl|wget|python-requests|python-urllib|python-httpx|aiohttp|go-http-client|okhttp|"
                      r"node-fetch|axios|undici|libwww-perl|java|httpie)\b", re.I)
#: a crawler says so: a product token ending in "bot" with its version or a dash (Googlebot/2.1, bingbot/2.0,
#: Slackbot-LinkExpanding), a "+http" address to read about it, or a crawler's word; never a phone called CUBOT
_UA_BOT = re.compile(r"bot[/\-;]|bot \d|\+https?://|crawl|spider|slurp|bingpreview|facebookexternalhit", re.I)
#: browser families by the product token that names them, the first found winning (Edge and Opera say
#: Chrome and Safari too, Chrome says Safari)
_UA_FAMILIES = (("edg/", "edge"), ("edge/", "edge"), ("edga/", "edge"), ("edgios/", "edge"), ("opr/", "opera"),
                ("opera", "opera"), ("samsungbrowser/", "samsung"), ("firefox/", "firefox"), ("fxios/", "firefox"),
                ("crios/", "chrome"), ("chrome/", "chrome"), ("chromium/", "chrome"), ("safari/", "safari"))
_UA_SYSTEMS = (("windows", "windows"), ("iphone", "ios"), ("ipad", "ios"), ("ipod", "ios"), ("android", "android"),
               (" cros ", "chromeos"), ("mac os x", "mac"), ("macintosh", "mac"), ("linux", "linux"), ("x11", "linux"))


def user_agent_class(ua: str) -> tuple[str, str, str, bool]:
    """What a site varying by ``User-Agent`` tells apart: the browser family (or the tool, or ``bot``), the
    operating system, the device class (``mobile``, ``tablet``, ``desktop``) and whether the browser says it
    is headless, never the version: a snapshot replayed by next year's Chromium is answered as this one's
    was (Chromium's reduced User-Agent carries its major version and nothing else that changes)."""
    low = ua.lower()
    if _UA_BOT.search(low):
        family = "bot"
    elif (tool := _UA_TOOL.match(low)) is not None:
        family = tool.group(1)
    else:
        family = next((name for token, name in _UA_FAMILIES if token in low), low.split("/", 1)[0].strip())
    system = next((name for token, name in _UA_SYSTEMS if token in low), "")
    if "ipad" in low or "tablet" in low or ("android" in low and "mobile" not in low):
        device = "tablet"
    elif "mobi" in low or "iphone" in low or "ipod" in low:
        device = "mobile"
    else:
        device = "desktop"
    return family, system, device, "headless" in low


def _vary_value(name: str, headers: Iterable[tuple[str, str]]) -> Any:
    """A request field's value as ``Vary`` compares it: every line, comma-joined, spaces normalised, lower
    case; a Cookie by its cookie names only (their values change with every visit: a session id, a
    timestamp; being logged in or not is which cookies there are), analytics cookies left out; a
    User-Agent by its class (:func:`user_agent_class`: family, system, device, headless; not the version)."""
    values = [v for k, v in headers if k.lower() == name]
    if name == "cookie":
        names = (part.split("=", 1)[0].strip() for v in values for part in v.split(";") if part.strip())
        return frozenset(n for n in names if not n.lower().startswith(_TRACKING_COOKIES))
    if name == "user-agent" and values:
        return user_agent_class(" ".join(values))
    return ",".join(" ".join(v.split()).lower() for v in values) if values else None


def vary_differs(names: Sequence[str], recorded: Iterable[tuple[str, str]],
                 asked: Iterable[tuple[str, str]]) -> list[str]:
    """The ``Vary`` names on which a request differs from the one an answer was recorded for."""
    recorded, asked = list(recorded), list(asked)
    return [n for n in names if _vary_value(n, recorded) != _vary_value(n, asked)]
