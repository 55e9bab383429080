"""The canonical match key of a request, and how request bodies fold into it.

:func:`match_key` is the one function that decides when two requests are "the
same" for replay. It writes a request as ``METHOD scheme://(surt,host,)/path?query``:

* the URL in SURT style: scheme and host lower-cased, host labels reversed,
  default ports (80, 443), user info and the fragment dropped, percent-escapes
  normalised, ``;jsessionid=``-style path parameters dropped;
* query parameters sorted, with volatile ones dropped by rule (cache-busters,
  session ids, ``utm_*``/``fbclid``/``gclid``, epoch-time values, and the
  values, not the names, of JSONP callbacks);
* for a request with a body, the pywb convention: ``__wb_method=post`` and the
  body as query fields, in the one form the CDXJ index also uses
  (:mod:`ego2web_replay.snapshots.postform`), then the same clean-up on the
  body fields (volatile fields like ``timestamp``/``nonce``/``requestId`` and
  date-time values ignored), sorted; an opaque body is its base64.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, unquote_plus

from ..snapshots.postform import request_body_query
from ..snapshots.sortedfile import key_bytes
from .rules import (
    PARAM_CALLBACK,
    PARAM_DROP,
    PARAM_KEEP,
    PARAM_TIMESTAMP,
    CompiledRules,
    MatchRules,
)

__all__ = [
    "BODY_PREFIX",
    "CanonicalRequest",
    "KeyMaker",
    "body_form",
    "canonical_url",
    "canonicalize",
    "entry_key",
    "match_key",
    "surt_host",
    "url_host",
]

_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = "/;:@!$&'()*+,=%-._~"
_QUERY_SAFE = "/?:@!$'()*,;-._~"
_PATH_PARAM = re.compile(r";([^/;=?]+)=[^/;?]*")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_DEFAULT_PORT = {"http": "80", "https": "443", "ws": "80", "wss": "443"}
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?")
BODY_PREFIX = "\x00"
_PLAIN_FULL_QUERY = re.compile(r"[A-Za-z0-9\-._~!$'()*,;:@/?&=]*")
_HOST = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?(\[[^\]/?#]*\]|[^:/?#]*)")
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9\-._~!$'()*,;:@/?]*")
_PLAIN_PLUS = re.compile(r"[A-Za-z0-9\-._~!$'()*,;:@/?+]*")


def _norm_escape(m: re.Match[str]) -> str:
    code = int(m.group(1), 16)
    return chr(code) if code in _UNRESERVED else "%" + m.group(1).upper()


def _norm_path(path: str, rules: CompiledRules) -> str:
    if not path:
        return "/"
    if ";" in path:
        path = _PATH_PARAM.sub(lambda m: "" if rules.is_session_param(m.group(1).lower()) else m.group(0), path)
    if "%" in path:
        path = _PCT.sub(_norm_escape, path)
    if not path.isascii() or " " in path:
        path = quote(path, safe=_PATH_SAFE)
    return path


_SURT_HOSTS: dict[str, str] = {}


def surt_host(host: str) -> str:
    """``www.example.com`` -> ``com,example,www,`` (SURT host part, www kept; memoised)."""
    cached = _SURT_HOSTS.get(host)
    if cached is None:
        cached = _surt_host(host)
        if len(_SURT_HOSTS) < 100_000:
            _SURT_HOSTS[host] = cached
    return cached


def _surt_host(host: str) -> str:
    host = host.lower().rstrip(".")
    if not host or host[0] == "[" or host.replace(".", "").isdigit():
        return host + ","
    return ",".join(reversed(host.split("."))) + ","


class CanonicalRequest(NamedTuple):
    """A request's canonical form: its key, its fuzzy group and its field pairs.

    ``pairs`` are the kept query parameters, then the kept body fields with
    their names prefixed by :data:`BODY_PREFIX`.
    """

    key: str
    group: str
    pairs: list[tuple[str, str]]


def _url_parts(url: str) -> tuple[str, str, str, str, str]:
    """(scheme, host, port text, path, query) of an absolute URL; fragment dropped."""
    m = _URL.match(url)
    if m is None:
        return "", "", "", url.partition("#")[0], ""
    scheme, authority, path, query = m.groups()
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        host, _, rest = authority.partition("]")
        host += "]"
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = authority.partition(":")
    return scheme.lower(), host.lower().rstrip("."), port, path, query or ""


def _encode(part: str) -> str:
    """One query name or value in canonical %-encoding (``+`` read as a space)."""
    if _PLAIN_QUERY.fullmatch(part):
        return part
    if _PLAIN_PLUS.fullmatch(part):
        return part.replace("+", "%20")
    return quote(unquote_plus(part), safe=_QUERY_SAFE)


def url_host(url: str) -> str:
    """The lower-cased host of an absolute URL (as the match key sees it)."""
    m = _HOST.match(url)
    return m.group(1).lower().rstrip(".") if m else ""


def _query_params(query: str, rules: CompiledRules) -> list[tuple[str, str]]:
    """Raw query -> canonically encoded (name, value) pairs with volatile ones dropped."""
    plain = _PLAIN_FULL_QUERY.fullmatch(query) is not None
    memo = rules._params
    epoch_any = rules.drop_epoch_values
    # Engine.IO (Socket.IO's transport: `EIO=4&transport=polling&t=...`) adds `t`, a random cache-buster
    # (engine.io-client's randomString(): base-36 time digits and random ones), to every poll: never content
    engine_io = query.startswith("EIO=") or "&EIO=" in query
    out: list[tuple[str, str]] = []
    for item in query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        if not plain:
            name, value = _encode(name), _encode(value)
        lname = name.lower()
        cls = memo.get(lname)
        if cls is None:
            cls = rules.param_class(lname)
        if cls == PARAM_DROP or (engine_io and lname == "t" and cls != PARAM_KEEP):
            continue
        if cls == PARAM_CALLBACK:
            value = ""
        elif (
            cls != PARAM_KEEP
            and len(value) >= 10
            and (epoch_any or cls == PARAM_TIMESTAMP)
            and _epochish(value, rules)
        ):
            continue
        out.append((name, value))
    return out


def _epochish(value: str, rules: CompiledRules) -> bool:
    if rules.is_epoch(value):
        return True
    head, dot, tail = value.partition(".")
    return bool(dot) and tail.isdigit() and rules.is_epoch(head)


def _clean_fields(pairs: list[tuple[str, str]], rules: CompiledRules) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, value in pairs:
        lname = unquote_plus(name).lower()
        cls = rules.field_class(lname)
        if cls != PARAM_KEEP:
            if cls == PARAM_DROP:
                continue
            # `time`, `ts`, `timestamp` ... name a fresh time only when the value is one (`"time": "21:00"`
            # is a booking's time): as for query parameters, drop them only when epoch-valued
            if (rules.drop_epoch_values or rules.is_timestamp_param(lname)) and _epochish(value, rules):
                continue
            if rules.drop_datetime_fields and _DATETIME.match(unquote_plus(value)):
                continue
        out.append((name, value))
    return out


def canonical_url(url: str, rules: MatchRules) -> str:
    """The SURT-style canonical URL: ``scheme://(com,example,www,)/path?sorted``."""
    return canonicalize("GET", url, None, rules).key[4:]


def canonicalize(method: str, url: str, body_query: str | None, rules: MatchRules) -> CanonicalRequest:
    """Key, fuzzy group (method, scheme, host, path) and field pairs of a request.

    ``body_query`` is the request body in the index's form
    (:func:`body_form`), ``None`` for a request without a body.
    """
    method = method.upper()
    scheme, host, port, path, query = _url_parts(url)
    compiled = rules.for_host(host)
    netloc = surt_host(host)
    if port and port != _DEFAULT_PORT.get(scheme):
        netloc += ":" + port
    group = f"{method} {scheme}://({netloc})" + _norm_path(path, compiled)
    params = _query_params(query, compiled) if query else []
    params.sort()
    pairs = params
    text = "&".join([k + "=" + v for k, v in params])
    if method not in ("GET", "HEAD"):
        fields = sorted(_clean_fields(_form_fields(body_query or ""), compiled))
        pairs = params + [(BODY_PREFIX + k, v) for k, v in fields]
        body_text = f"__wb_method={method.lower()}" + "".join(f"&{k}={v}" for k, v in fields)
        text = f"{text}&{body_text}" if text else body_text
    key = group + ("?" + text if text else "")
    return CanonicalRequest(key, group, pairs)


class KeyMaker:
    """:func:`canonicalize`'s keys of many requests at once, as index keys, for the canonical table of
    an index: ``key_bytes(url_host(url), canonicalize(method, url, body, rules).key)``, byte for byte.

    Most of a key is the same over many URLs: what a scheme and authority give (host, rules,
    the SURT host and port) is worked out once per ``scheme://authority``, and a query's cleaned,
    sorted text once per query and host rules (bounded). A GET or HEAD of an absolute URL whose path
    needs no normalising is put together from those; every other request goes through
    :func:`canonicalize` itself."""

    MEMO_MAX = 100_000

    def __init__(self, rules: MatchRules) -> None:
        self.rules = rules
        self._origins: dict[str, tuple[str, str, str, dict[str, str], CompiledRules] | None] = {}
        self._queries: dict[int, dict[str, str]] = {}  # by id of the host rules (kept alive by the rules)

    def texts(self, methods: Sequence[str], urls: Sequence[str], bodies: Sequence[str | None]) -> list[str] | None:
        """``host NUL key`` of each request; None when a host or key holds NUL or ``\\x01`` (then the
        keys need :func:`~ego2web_replay.snapshots.sortedfile.key_bytes`: :meth:`keys`)."""
        plain = self._plain_gets(urls) if not any(bodies) and methods.count("GET") == len(methods) else None
        out = plain if plain is not None else self._texts(methods, urls, bodies)
        joined = "".join(out)
        return None if "\x01" in joined or joined.count("\x00") != len(out) else out

    def _texts(self, methods: Sequence[str], urls: Sequence[str], bodies: Sequence[str | None]) -> list[str]:
        origins, origin_of, query_of = self._origins, self._origin, self._query
        out: list[str] = []
        add = out.append
        for method, url, body in zip(methods, urls, bodies, strict=True):
            if method == "GET" or method == "HEAD":
                authority = url.find("://") + 3
                end = url.find("/", authority)
                if authority > 2 and end > 0:
                    origin = url[:end]
                    known = origins.get(origin)
                    if known is None and origin not in origins:
                        known = origin_of(origin, authority)
                    if known is not None:
                        rest = url[end:]
                        path, _, query = (rest.partition("#")[0] if "#" in rest else rest).partition("?")
                        if ";" not in path and "%" not in path and " " not in path and path.isascii():
                            get, host, head, queries, compiled = known
                            start = get if method == "GET" else f"{host}\x00{method}{head}"
                            if not query:
                                add(start + path)
                                continue
                            text = queries.get(query)
                            if text is None:
                                text = query_of(query, queries, compiled)
                            add(start + path + text)
                            continue
            add(f"{url_host(url)}\x00{canonicalize(method, url, body or None, self.rules).key}")
        return out

    def _plain_gets(self, urls: Sequence[str]) -> list[str] | None:
        """:meth:`texts` of GETs without bodies when no URL holds a character that sends a path the
        general way (``#;%``, a space, beyond ASCII), NUL or ``\x01``: the texts :meth:`texts` gives, each URL's
        origin taken as the one before when it starts the URL (the index keeps a host's URLs
        together); None (nothing done) for other URLs."""
        joined = "\n".join(urls)
        if not joined.isascii() or any(c in joined for c in "#;% \x00\x01"):
            return None
        origins, origin_of, query_of = self._origins, self._origin, self._query
        out: list[str] = []
        add = out.append
        last, cut, known = "\n", 0, None  # the origin before (no URL starts with a line break), its length
        for url in urls:
            if not (url.startswith(last) and url[cut:cut + 1] == "/"):
                authority = url.find("://") + 3
                end = url.find("/", authority)
                if authority < 3 or end < 0:
                    add(f"{url_host(url)}\x00{canonicalize('GET', url, None, self.rules).key}")
                    last, cut, known = "\n", 0, None
                    continue
                last, cut = url[:end], end
                known = origins.get(last)
                if known is None and last not in origins:
                    known = origin_of(last, authority)
                if known is None:  # an origin taking the general way
                    add(f"{url_host(url)}\x00{canonicalize('GET', url, None, self.rules).key}")
                    continue
            elif known is None:
                add(f"{url_host(url)}\x00{canonicalize('GET', url, None, self.rules).key}")
                continue
            path, _, query = url[cut:].partition("?")
            if not query:
                add(known[0] + path)
                continue
            text = known[3].get(query)
            if text is None:
                text = query_of(query, known[3], known[4])
            add(known[0] + path + text)
        return out

    def keys(self, methods: Sequence[str], urls: Sequence[str], bodies: Sequence[str | None]) -> list[bytes]:
        """The index key of each request."""
        texts = self.texts(methods, urls, bodies)
        if texts is None:
            return [key_bytes(url_host(u), canonicalize(m, u, b or None, self.rules).key)
                    for m, u, b in zip(methods, urls, bodies, strict=True)]
        return [t.encode("utf-8", "surrogatepass") for t in texts]

    def _query(self, query: str, queries: dict[str, str], compiled: CompiledRules) -> str:
        """``?`` and the cleaned, sorted pairs of ``query`` (empty when none is kept), remembered."""
        params = _query_params(query, compiled)
        params.sort()
        text = "&".join([k + "=" + v for k, v in params])
        if len(queries) >= self.MEMO_MAX:
            queries.clear()
        queries[query] = text = "?" + text if text else ""
        return text

    def _origin(self, origin: str, authority: int) -> tuple[str, str, str, dict[str, str], CompiledRules] | None:
        """``(url_host NUL "GET scheme://(netloc)", url_host, " scheme://(netloc)", query memo, rules)``
        of the host of ``scheme://authority``, or None when such URLs take the general way (an
        authority holding ``?`` or ``#``, or no URL)."""
        m = _URL.match(origin)
        found = None
        if m is not None and m.end() == len(origin) and not any(c in origin[authority:] for c in "?#"):
            scheme, host, port, _path, _query = _url_parts(origin)
            netloc = surt_host(host)
            if port and port != _DEFAULT_PORT.get(scheme):
                netloc += ":" + port
            compiled = self.rules.for_host(host)
            host, head = url_host(origin), f" {scheme}://({netloc})"
            found = (f"{host}\x00GET{head}", host, head, self._queries.setdefault(id(compiled), {}), compiled)
        if len(self._origins) >= self.MEMO_MAX:
            self._origins.clear()
        self._origins[origin] = found
        return found


def body_form(method: str, content_type: str | None, body: bytes | None) -> str | None:
    """A raw request body in the index's form (the pywb convention), ``None`` when it has none.

    Archived bodies are indexed with the same function
    (:func:`ego2web_replay.snapshots.postform.request_body_query`), so both
    sides of a comparison are in one form.
    """
    if not body or method.upper() in ("GET", "HEAD"):
        return None
    return request_body_query(content_type, body)


def _form_fields(query: str) -> list[tuple[str, str]]:
    """A body in the index's form as canonically encoded (name, value) fields."""
    out: list[tuple[str, str]] = []
    for item in query.split("&"):
        if item:
            name, _, value = item.partition("=")
            out.append((_encode(name), _encode(value)))
    return out


def match_key(method: str, url: str, body: bytes | None, content_type: str | None, rules: MatchRules) -> str:
    """The canonical match key of a request; two requests with equal keys match.

    ``METHOD scheme://(surt,host,)/path?params[&__wb_method=post&fields]`` with
    the URL canonicalised, volatile parameters and body fields dropped by
    ``rules`` (see the module docstring and ``rules.yaml``), and the rest sorted.
    ``body`` is the raw request body; it is put in the index's form first.
    """
    return canonicalize(method, url, body_form(method, content_type, body), rules).key


def entry_key(rules: MatchRules | None = None) -> Callable[[Any], str]:
    """"The same request" for index entries (``method``, ``url``, ``request_body_query``), as replay
    matches: their canonical key under ``rules`` (default: the default rules). ``snapshot extend`` and
    ``record --explore`` merge with it, so a capture differing from a held one only by a cache-buster
    or a tracking parameter is not merged beside it."""
    from .rules import default_rules

    chosen = rules if rules is not None else default_rules()
    return lambda entry: canonicalize(entry.method, entry.url, entry.request_body_query, chosen).key
