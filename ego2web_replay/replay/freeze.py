"""Deterministic pages: freeze the page clock at capture time and seed randomness.

:func:`freeze_script` returns the JavaScript (``freeze.js`` beside this module)
for one capture time and seed. Install it either with Playwright's
``context.add_init_script(script)`` or, for any browser behind the replay
proxy, by serving archived HTML through :func:`inject_into_html`, which inlines
it as the page's first script. Installing both is harmless: the second copy
sees the first and does nothing.

The clock is virtual (see the header of ``freeze.js``): it starts at the
capture time and moves only by a fixed step per read, to the due time of
timers when they fire, and by one 60 Hz frame per animation frame, never by
the real clock; so two replays of the same trajectory read the same times.
Not covered: Web/Service Workers (Playwright init scripts do not run there),
``Event.timeStamp``, CSS animations (they run on real time) and the time zone
(set Playwright's ``timezone_id`` for that).

:func:`inject_into_html` is pure: it returns new bytes and headers and never
touches the archive.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from datetime import UTC, datetime
from functools import cache
from importlib import resources

from .httputil import decode_body

__all__ = ["freeze_script", "inject_into_html", "script_hash", "parse_warc_timestamp"]

_CONFIG = re.compile(r"/\*@EGO2WEB_FREEZE_CONFIG@\*/ \{[^}]*\}")


@cache
def _template() -> str:
    return resources.files(__package__).joinpath("freeze.js").read_text(encoding="utf-8")


def parse_warc_timestamp(timestamp: str) -> datetime:
    """A 14-digit WARC/CDX timestamp (``20240405100000``) as an aware UTC datetime."""
    digits = (timestamp + "00000000000000")[:14]
    return datetime.strptime(digits, "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def freeze_script(capture_time: datetime, seed: int = 0, step_us: int = 1) -> str:
    """The freeze script for one capture time (naive datetimes are read as UTC) and seed.

    ``step_us`` is how many microseconds the virtual clock advances on each
    read; the default 1 keeps ``Date.now()`` on the capture millisecond for the
    first thousand reads.
    """
    if capture_time.tzinfo is None:
        capture_time = capture_time.replace(tzinfo=UTC)
    config = {
        "timeMs": int(capture_time.timestamp() * 1000),
        "seed": int(seed) & 0xFFFFFFFF,
        "stepUs": max(0, int(step_us)),
    }
    return _CONFIG.sub(lambda _: json.dumps(config), _template(), count=1)


def script_hash(script: str) -> str:
    """The CSP source (``'sha256-...'``) that allows ``script`` as an inline script."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


# ---- HTTP bodies ------------------------------------------------------------------

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_DROP_AFTER_REWRITE = {"content-encoding", "content-length", "transfer-encoding", "content-md5", "digest"}


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _is_html(content_type: str | None, body: bytes) -> bool:
    if content_type:
        return content_type.split(";", 1)[0].strip().lower() in _HTML_TYPES
    head = body[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html"))


_HEAD_END = re.compile(rb"<script\b|</head\s*>|<body\b", re.IGNORECASE)
_META_CHARSET = re.compile(rb"<meta\b[^>]*\bcharset\b[^>]*>", re.IGNORECASE)
_HEAD_OPEN = re.compile(rb"<head(?:\s[^>]*)?>", re.IGNORECASE)
_HTML_OPEN = re.compile(rb"<html(?:\s[^>]*)?>", re.IGNORECASE)
_DOCTYPE = re.compile(rb"\s*<!doctype[^>]*>", re.IGNORECASE)


def _insertion_point(html: bytes) -> int:
    """Where the script goes: after <meta charset>, else <head>, else <html>, else the doctype."""
    end = _HEAD_END.search(html)
    limit = end.start() if end else len(html)
    for pattern in (_META_CHARSET, _HEAD_OPEN, _HTML_OPEN):
        m = pattern.search(html, 0, limit)
        if m:
            return m.end()
    start = 3 if html.startswith(b"\xef\xbb\xbf") else 0
    m = _DOCTYPE.match(html, start)
    return m.end() if m else start


def _wide_charset(content_type: str | None, body: bytes) -> str | None:
    """The codec of a UTF-16/32 page (by BOM or header), else None (ASCII-compatible)."""
    if body.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "utf-32"
    if body.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    m = re.search(r"charset\s*=\s*\"?([\w-]+)", content_type or "", re.IGNORECASE)
    if m and m.group(1).lower().startswith(("utf-16", "utf-32")):
        return m.group(1).lower()
    return None


def _allow_hash(policy: str, source: str) -> str:
    """A CSP policy that also allows the inline script with hash ``source``."""
    directives = [d.strip() for d in policy.split(";") if d.strip()]
    names = [d.split(None, 1)[0].lower() for d in directives]

    def with_hash(values: list[str]) -> list[str]:
        lowered = [v.lower() for v in values]
        gated = any(v.startswith(("'nonce-", "'sha")) or v == "'strict-dynamic'" for v in lowered)
        if "'unsafe-inline'" in lowered and not gated:
            return values  # inline scripts already allowed; a hash would disable that
        return [v for v in values if v.lower() != "'none'"] + [source]

    out = []
    for directive, name in zip(directives, names, strict=True):
        parts = directive.split()
        if name in ("script-src", "script-src-elem"):
            parts = [parts[0], *with_hash(parts[1:])]
        out.append(" ".join(parts))
    if "script-src" not in names and "script-src-elem" not in names and "default-src" in names:
        default = directives[names.index("default-src")].split()[1:]
        out.append(" ".join(["script-src", *with_hash(default)]))
    return "; ".join(out)


_META_CSP = re.compile(
    rb"<meta\b(?=[^>]*\bhttp-equiv\s*=\s*[\"']?content-security-policy\b)[^>]*>", re.IGNORECASE
)
_CONTENT_ATTR = re.compile(rb"""\bcontent\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)


def _allow_in_meta_csp(page: bytes, source: str) -> bytes:
    """Add the script hash to every ``<meta http-equiv="Content-Security-Policy">``."""

    def fix(tag: re.Match[bytes]) -> bytes:
        attr = _CONTENT_ATTR.search(tag.group(0))
        if attr is None:
            return tag.group(0)
        raw = attr.group(1) if attr.group(1) is not None else attr.group(2)
        policy = _allow_hash(html.unescape(raw.decode("utf-8", errors="replace")), source)
        new_attr = b'content="' + html.escape(policy, quote=True).encode("utf-8") + b'"'
        text = tag.group(0)
        return text[: attr.start()] + new_attr + text[attr.end() :]

    return _META_CSP.sub(fix, page) if b"ecurity-" in page or b"ECURITY-" in page else page


def inject_into_html(
    body: bytes, headers: list[tuple[str, str]], script: str
) -> tuple[bytes, list[tuple[str, str]]]:
    """Archived HTML with ``script`` inlined as its first script, ready to serve.

    ``body`` is the archived payload as stored (gzip/deflate/br/zstd encodings
    are decoded by :func:`~.httputil.decode_body`; unknown ones or corrupt bodies are served unchanged). The
    result is identity-encoded with a correct Content-Length; a
    Content-Security-Policy (header or ``<meta http-equiv>``) that restricts
    scripts gets the script's sha256 hash added. Non-HTML responses and empty bodies come back unchanged.
    """
    if not body:
        return body, headers
    if "</script" in script.lower():
        raise ValueError("the script must not contain '</script'")
    content_type = _header(headers, "content-type")
    if content_type and not _is_html(content_type, b""):
        return body, headers
    plain = decode_body(body, _header(headers, "content-encoding"))
    if plain is None or not _is_html(content_type, plain):
        return body, headers
    tag = f"<script>{script}</script>".encode()
    source = script_hash(script)
    wide = _wide_charset(content_type, plain)
    if wide:
        utf8 = _allow_in_meta_csp(plain.decode(wide).encode("utf-8"), source)
        at = _insertion_point(utf8)
        new_body = (utf8[:at] + tag + utf8[at:]).decode("utf-8").encode(wide)
    else:
        page = _allow_in_meta_csp(plain, source)
        at = _insertion_point(page)
        new_body = page[:at] + tag + page[at:]
    new_headers: list[tuple[str, str]] = []
    for name, value in headers:
        lname = name.lower()
        if lname in _DROP_AFTER_REWRITE:
            continue
        if lname == "content-security-policy":
            value = _allow_hash(value, source)
        new_headers.append((name, value))
    new_headers.append(("Content-Length", str(len(new_body))))
    return new_body, new_headers
