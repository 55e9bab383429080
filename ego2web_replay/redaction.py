"""Credentials never archived: one redaction applied everywhere a request or URL is written.

Snapshots, trajectories and the database are made to be shared, so by default
(``--keep-credentials`` turns it off) a :class:`Redactor` replaces:

* the values of credential headers (:data:`DEFAULT_HEADERS` plus any named),
  in requests and responses; ``Cookie`` and ``Set-Cookie`` keep the cookie
  names and attributes, only the values go;
* the values of query parameters and of form or JSON body fields whose name
  looks like a credential (:func:`sensitive_name`: token, key, api-key, auth,
  password, session, secret, sig ... plus any named);
* URL userinfo (``user:password@``), in request URLs, ``Referer``,
  ``Location`` and any URL inside free text (errors, logs).

Redaction is deterministic: the same input gives the same output. The replay
applies the same redactor to incoming requests before matching, so a frozen
page whose token differs from the recorded one still matches (both sides read
``token=ego2web-redacted``). Not redacted: multipart bodies, response bodies and
content-encoded request bodies (documented in docs/redaction.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

__all__ = ["Redactor", "REDACTED", "MARK", "DEFAULT_HEADERS", "sensitive_name", "NO_REDACTION"]

#: What a redacted header value becomes.
REDACTED = "[redacted by ego2web-replay]"
#: What a redacted query/form/JSON/cookie value or URL userinfo becomes (URL-safe).
MARK = "ego2web-redacted"

DEFAULT_HEADERS: frozenset[str] = frozenset({
    "authorization", "proxy-authorization", "cookie", "set-cookie", "set-cookie2", "x-api-key", "api-key",
    "x-auth-token", "x-access-token", "x-csrf-token", "x-xsrf-token", "x-amz-security-token",
    "x-goog-api-key", "proxy-authenticate-info", "x-session-token",
})
_URL_HEADERS = frozenset({"referer", "location", "content-location", "origin-trial-url", "link"})

#: Words that make a parameter a credential wherever they appear in its name.
_SUBSTRINGS = ("token", "password", "passwd", "secret", "apikey", "sessid", "session", "credential",
               "signature", "privatekey")
#: Words that make it one only as a whole word (``key`` but not ``keyword``, ``auth`` but not ``author``).
_WORDS = frozenset({"key", "auth", "oauth", "authorization", "authentication", "sig", "pwd", "pass", "jwt",
                    "otp", "sid"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_IN_TEXT = re.compile(r"\b(?:https?|wss?)://[^\s\"'<>\\]+", re.I)
_MAX_JSON_BODY = 4 * 1024 * 1024


def sensitive_name(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a parameter or field called ``name`` holds a credential."""
    low = name.strip().lower()
    if not low:
        return False
    if low in {e.lower() for e in extra}:
        return True
    joined = re.sub(r"[^a-z0-9]", "", low)
    if any(s in joined for s in _SUBSTRINGS):
        return True
    words = {w for w in re.split(r"[^a-z0-9]+", _CAMEL.sub("_", name.strip()).lower()) if w}
    return bool(words & _WORDS)


def _redact_pairs(query: str, extra: Sequence[str]) -> str:
    if "=" not in query:
        return query
    out = []
    changed = False
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if eq and value != MARK and sensitive_name(unquote_plus(name), extra):
            out.append(f"{name}={MARK}")
            changed = True
        else:
            out.append(part)
    return "&".join(out) if changed else query


def _redact_json(value: Any, extra: Sequence[str]) -> tuple[Any, bool]:
    stack: list[Any] = [value]
    changed = False
    while stack:  # iterative: no recursion limit to hit on deep input
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if sensitive_name(str(k), extra) and not isinstance(v, (dict, list)) and v != MARK and v is not None:
                    node[k] = MARK
                    changed = True
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return value, changed


@dataclass(frozen=True)
class Redactor:
    """Redacts credentials; ``enabled=False`` (``--keep-credentials``) makes every method the identity."""

    enabled: bool = True
    headers: frozenset[str] = DEFAULT_HEADERS
    params: tuple[str, ...] = ()
    extra_headers: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def make(cls, *, keep_credentials: bool = False, headers: Iterable[str] = (),
             params: Iterable[str] = ()) -> Redactor:
        extra_h = tuple(sorted({h.strip().lower() for h in headers if h.strip()}))
        return cls(enabled=not keep_credentials, headers=DEFAULT_HEADERS | set(extra_h),
                   params=tuple(sorted({p.strip() for p in params if p.strip()})), extra_headers=extra_h)

    @classmethod
    def from_settings(cls, settings: dict[str, Any] | None) -> Redactor | None:
        """The redactor a snapshot was recorded with (its manifest ``settings``), or None if it was not."""
        red = (settings or {}).get("redaction")
        if not isinstance(red, dict):
            return None
        return cls.make(headers=[str(h) for h in red.get("headers") or []],
                        params=[str(p) for p in red.get("params") or []])

    def settings(self) -> dict[str, Any] | None:
        """What a manifest records so the replay can redact incoming requests the same way."""
        return {"headers": list(self.extra_headers), "params": list(self.params)} if self.enabled else None

    # -- URLs and text -------------------------------------------------------------
    def url(self, url: str) -> str:
        """``url`` with userinfo and credential query (and fragment) values replaced."""
        if not self.enabled or not url or ("@" not in url and "=" not in url):
            return url
        try:
            parts = urlsplit(url)
        except ValueError:
            return url
        netloc = parts.netloc
        if "@" in netloc:
            netloc = MARK + "@" + netloc.rsplit("@", 1)[1]
        query = _redact_pairs(parts.query, self.params)
        fragment = _redact_pairs(parts.fragment, self.params)
        if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
            return url
        return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))

    def text(self, text: str) -> str:
        """Every URL inside free text (an error message, a log line) redacted."""
        if not self.enabled or not text or "://" not in text:
            return text
        return _URL_IN_TEXT.sub(lambda m: self.url(m.group(0)), text)

    # -- headers and bodies ----------------------------------------------------------
    def header_value(self, name: str, value: str) -> str:
        n = name.lower()
        if not self.enabled:
            return value
        if n in ("cookie",):
            return "; ".join(f"{c.partition('=')[0].strip()}={MARK}" if "=" in c else c
                             for c in value.split(";"))
        if n in ("set-cookie", "set-cookie2"):
            first, sep, attrs = value.partition(";")
            cname = first.partition("=")[0].strip()
            return f"{cname}={MARK}{sep}{attrs}"
        if n in self.headers:
            return REDACTED
        if n in _URL_HEADERS:
            return self.text(value) if n == "link" else self.url(value)
        return value

    def header_list(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """Header values redacted; names and order kept."""
        if not self.enabled:
            return list(headers)
        return [(k, self.header_value(k, v)) for k, v in headers]

    def body(self, content_type: str | None, body: bytes, content_encoding: str | None = None) -> bytes:
        """A form or JSON request body with credential fields' values replaced; other bodies unchanged."""
        if not self.enabled or not body or (content_encoding or "identity").lower() not in ("", "identity"):
            return body
        ctype = (content_type or "").split(";")[0].strip().lower()
        if ctype == "application/x-www-form-urlencoded":
            try:
                text = body.decode("ascii")
            except UnicodeDecodeError:
                return body
            redacted = _redact_pairs(text, self.params)
            return body if redacted == text else redacted.encode("ascii")
        if (ctype.endswith("/json") or ctype.endswith("+json")) and len(body) <= _MAX_JSON_BODY:
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                return body
            data, changed = _redact_json(data, self.params)
            return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8") if changed else body
        return body

    # -- whole documents ---------------------------------------------------------------
    def strings(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every URL in every string redacted."""
        if not self.enabled:
            return value
        stack: list[Any] = [value]
        while stack:
            node = stack.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, v in list(items):
                if isinstance(v, str):
                    node[k] = self.text(v) if "://" in v else v
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        return value


NO_REDACTION = Redactor(enabled=False)
