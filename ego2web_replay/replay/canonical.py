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
  body as query fields (see :func:`post_query`), then the same clean-up on the
  body fields (volatile fields like ``timestamp``/``nonce``/``requestId`` and
  date-time values ignored), sorted; an opaque body becomes a hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from email.message import Message
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, unquote_plus, urlencode

from ..limits import depth_ok
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
    "body_fields",
    "canonical_url",
    "canonicalize",
    "match_key",
    "post_query",
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


def _q(text: str) -> str:
    """A decoded name or value, %-encoded for a key."""
    return text if _PLAIN_QUERY.fullmatch(text) else quote(text, safe=_QUERY_SAFE)


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
        if cls == PARAM_DROP:
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
        cls = rules.field_class(name.lower())
        if cls != PARAM_KEEP:
            if cls == PARAM_DROP:
                continue
            if rules.drop_epoch_values and _epochish(value, rules):
                continue
            if rules.drop_datetime_fields and _DATETIME.match(value):
                continue
        out.append((name, value))
    return out


def _json_leaves(obj: Any, name: str, out: list[tuple[str, str]], seen: dict[str, int]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _json_leaves(value, str(key), out, seen)
    elif isinstance(obj, list):
        for value in obj:
            _json_leaves(value, name, out, seen)
    else:
        count = seen.get(name, 0) + 1
        seen[name] = count
        key = name if count == 1 else f"{name}.{count}_"
        text = obj if isinstance(obj, str) else json.dumps(obj)
        out.append((key, text))


def _media_type(content_type: str | None) -> tuple[str, Message]:
    msg = Message()
    msg["content-type"] = content_type or "application/octet-stream"
    return msg.get_content_type(), msg


def _multipart_fields(body: bytes, msg: Message) -> list[tuple[str, str]] | None:
    boundary = msg.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        return None
    delimiter = b"--" + boundary.encode("latin-1")
    fields: list[tuple[str, str]] = []
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        head, sep, content = chunk.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            continue
        content = content.removesuffix(b"\r\n")
        part = Message()
        for line in head.decode("latin-1").split("\r\n"):
            key, colon, value = line.partition(":")
            if colon:
                part[key.strip()] = value.strip()
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        try:
            fields.append((name, content.decode("utf-8")))
        except UnicodeDecodeError:
            fields.append((name, "sha256:" + hashlib.sha256(content).hexdigest()))
    return fields


def body_fields(content_type: str | None, body: bytes) -> tuple[list[tuple[str, str]], bool]:
    """A body as (name, value) fields; ``True`` in second place when it is opaque.

    Form bodies give their fields, JSON its leaves (pywb naming: the leaf key,
    repeated keys numbered ``key.2_``), multipart its fields (a part that is
    not UTF-8 text, such as an image, as ``sha256:<hex>``); any
    other body gives one ``__wb_post_data`` field holding its base64 and the flag.
    """
    media, msg = _media_type(content_type)
    text: str | None = None
    if media == "application/x-www-form-urlencoded":
        text = body.decode("utf-8", errors="replace")
        return parse_qsl(text, keep_blank_values=True), False
    if media == "application/json" or media.endswith("+json") or media == "text/plain":
        try:
            parsed = json.loads(body) if depth_ok(body) else None  # _json_leaves recurses per level
        except (ValueError, RecursionError):
            parsed = None
        else:
            if isinstance(parsed, dict | list):
                leaves: list[tuple[str, str]] = []
                _json_leaves(parsed, "", leaves, {})
                return leaves, False
    if media.startswith("multipart/"):
        fields = _multipart_fields(body, msg)
        if fields is not None:
            return fields, False
    return [("__wb_post_data", base64.b64encode(body).decode("ascii"))], True


def post_query(method: str, content_type: str | None, body: bytes | None) -> str:
    """The pywb/cdxj-indexer query for a request body: ``__wb_method=post&...``.

    Form bodies are appended as they are (already a query), JSON as its leaf
    ``key=value`` fields and multipart as its fields (both form-encoded),
    anything else as ``__wb_post_data=<base64>``. GET and HEAD give ``""``.
    Appended to the URL's query and SURT-canonicalised, this gives the keys
    pywb and cdxj-indexer write for POST captures. JSON booleans and null are
    written ``true``/``false``/``null``.
    """
    method = method.upper()
    if method in ("GET", "HEAD"):
        return ""
    head = f"__wb_method={method.lower()}"
    if not body:
        return head
    media, _ = _media_type(content_type)
    if media == "application/x-www-form-urlencoded":
        return head + "&" + body.decode("utf-8", errors="replace")
    fields, opaque = body_fields(content_type, body)
    if opaque:
        return f"{head}&__wb_post_data={fields[0][1]}"
    return f"{head}&{urlencode(fields)}" if fields else head


def canonical_url(url: str, rules: MatchRules) -> str:
    """The SURT-style canonical URL: ``scheme://(com,example,www,)/path?sorted``."""
    return canonicalize("GET", url, None, None, rules).key[4:]


def canonicalize(
    method: str, url: str, body: bytes | None, content_type: str | None, rules: MatchRules
) -> CanonicalRequest:
    """Key, fuzzy group (method, scheme, host, path) and field pairs of a request."""
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
        fields: list[tuple[str, str]] = []
        if body:
            raw, opaque = body_fields(content_type, body)
            if opaque:
                fields = [("__wb_post_data", "sha256:" + hashlib.sha256(body).hexdigest())]
            else:
                fields = sorted((_q(k), _q(v)) for k, v in _clean_fields(raw, compiled))
        pairs = params + [(BODY_PREFIX + k, v) for k, v in fields]
        body_text = f"__wb_method={method.lower()}" + "".join(f"&{k}={v}" for k, v in fields)
        text = f"{text}&{body_text}" if text else body_text
    key = group + ("?" + text if text else "")
    return CanonicalRequest(key, group, pairs)


def match_key(method: str, url: str, body: bytes | None, content_type: str | None, rules: MatchRules) -> str:
    """The canonical match key of a request; two requests with equal keys match.

    ``METHOD scheme://(surt,host,)/path?params[&__wb_method=post&fields]`` with
    the URL canonicalised, volatile parameters and body fields dropped by
    ``rules`` (see the module docstring and ``rules.yaml``), and the rest sorted.
    """
    return canonicalize(method, url, body, content_type, rules).key
