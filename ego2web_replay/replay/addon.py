"""The replay addon: answers every request from the snapshot(s); never opens an upstream connection.

For each request: match it (:mod:`.matching`), read the archived response
(revisits resolved to their originals), and serve the archived status, reason,
headers and wire body (content-encoding kept; hop-by-hop headers dropped),
then apply what HTTP asks of a cache: HEAD, Range (206 slices of a stored
200), conditional requests (304), CORS preflights; HTML gets the determinism
script inlined (on the served copy only). A miss is answered by policy: a
synthetic status with ``X-Ego2Web-Replay: miss`` (default 404), or, for
diagnosis only, ``live`` (forwarded upstream and counted as ``live``: the
session is then not hermetic). Websocket upgrades are refused and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..models import ReplayLogEntry, ReplayStats
from ..validity import request_kind
from .httputil import (
    apply_range,
    clean_response_headers,
    conditional,
    decode_body,
    miss_response,
    not_modified_response,
    preflight_response,
    reason_phrase,
    rewrite_jsonp,
    shift_dates,
)
from .matching import IndexBase, ReplaySession

__all__ = ["Replayer", "REPLAY_HEADER", "MAX_LOG"]

log = logging.getLogger(__name__)
REPLAY_HEADER = "X-Ego2Web-Replay"
MAX_LOG = 100_000
CACHE_BYTES = 256 * 1024 * 1024  # archived responses kept in memory once read


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    n = name.lower()
    for k, v in headers:
        if k.lower() == n:
            return v
    return None


def inject_allowed(headers: Sequence[tuple[str, str]]) -> bool:
    """Only HTML documents get the determinism script."""
    ctype = (_header(headers, "content-type") or "").split(";")[0].strip().lower()
    return ctype in ("text/html", "application/xhtml+xml")


def _rename_jsonp(body: bytes, headers: list[tuple[str, str]], archived_url: str,
                  request_url: str) -> tuple[bytes, list[tuple[str, str]]]:
    """Serve a JSONP body under the callback name the page asked for now."""
    if "callback=" not in request_url.lower() and "jsonp=" not in request_url.lower() and "cb=" not in request_url.lower():
        return body, headers
    encoding = _header(headers, "content-encoding")
    plain = decode_body(body, encoding) if encoding else body
    if plain is None:
        return body, headers
    renamed = rewrite_jsonp(plain, archived_url, request_url)
    if renamed == plain:
        return body, headers
    kept = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", "content-length")]
    return renamed, kept + [("Content-Length", str(len(renamed)))]


def _chunked_without_length(headers: Sequence[tuple[str, str]]) -> bool:
    """The archived response was sent chunked (no Content-Length): serve it chunked too."""
    te = (_header(headers, "transfer-encoding") or "").lower()
    return "chunked" in te and _header(headers, "content-length") is None


def _dedupe_header(headers: list[tuple[str, str]], name: str) -> list[tuple[str, str]]:
    """``headers`` with only the first ``name`` header (case-insensitive) kept."""
    seen = False
    out = []
    for k, v in headers:
        if k.lower() == name:
            if seen:
                continue
            seen = True
        out.append((k, v))
    return out


def _set_header(headers: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    n = name.lower()
    return [(k, v) for k, v in headers if k.lower() != n] + [(name, value)]


class Replayer:
    """mitmproxy addon serving captures from ``index`` (built by :mod:`.session`).

    ``resolve(ref)`` returns ``(status, reason, headers, body)`` of the archived
    response for a capture's ``ref``. ``miss`` is a status code as text or ``live``.
    """

    def __init__(self, index: IndexBase, resolve: Any, *, miss: str = "404", freeze_script: str | None = None,
                 policy: str = "sequence", snapshots: Sequence[str] = (), redactor: Any = None) -> None:
        self.index = index
        self.redactor = redactor  # the snapshots' credential redaction, applied to requests before matching
        self.session: ReplaySession = index.session(policy)  # type: ignore[arg-type]
        self.resolve = resolve
        self.miss = miss
        self.freeze_script = freeze_script
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}
        self._cached_bytes = 0
        self.stats = ReplayStats(snapshots=list(snapshots))

    # -- bookkeeping -------------------------------------------------------
    def _log(self, method: str, url: str, outcome: str, status: int | None, matched: str | None = None,
             score: float | None = None, kind: str | None = None) -> None:
        with self._lock:
            s = self.stats
            setattr(s, outcome, getattr(s, outcome) + 1)
            if outcome in ("miss", "live") and len(s.missed_urls) < MAX_LOG:
                s.missed_urls.append(f"{method} {url}")
            if len(s.log) < MAX_LOG:
                s.log.append(ReplayLogEntry(method=method, url=url, outcome=outcome, status=status,  # type: ignore[arg-type]
                                            matched_url=matched, score=score, kind=kind))

    def snapshot_stats(self) -> ReplayStats:
        with self._lock:
            return self.stats.model_copy(deep=True)

    # -- hooks ---------------------------------------------------------------
    def server_connect(self, data: Any) -> None:
        if self.miss != "live":
            data.server.error = "ego2web-replay: hermetic replay never connects upstream"

    def request(self, flow: Any) -> None:
        from mitmproxy import http

        if flow.response is not None:  # answered by the guard
            if flow.metadata.get("ego2web") == "blocked":
                with self._lock:
                    self.stats.blocked += 1
            return
        req = flow.request
        method, url = req.method.upper(), req.pretty_url
        req_headers = [(k, v) for k, v in req.headers.items(multi=True)]
        if (_header(req_headers, "upgrade") or "").lower() == "websocket":
            flow.metadata["ego2web"] = "replayed"
            flow.response = http.Response.make(
                403, b"ego2web-replay: websockets are not replayed\n",
                {"Content-Type": "text/plain", REPLAY_HEADER: "websocket-refused", "Cache-Control": "no-store"})
            self._log(method, url, "websocket", 403)
            return
        kind = request_kind(_header(req_headers, "sec-fetch-dest"), _header(req_headers, "accept"), url,
                            _header(req_headers, "sec-fetch-mode"))
        body = req.raw_content or b""
        ctype = _header(req_headers, "content-type")
        if self.redactor is not None:  # the archive holds redacted requests: compare like with like
            url = self.redactor.url(url)
            body = self.redactor.body(ctype, body, _header(req_headers, "content-encoding"))
        result = self.session.match(method, url, body or None, ctype)
        if result.capture is None and method == "OPTIONS":
            status, reason, headers, rbody = preflight_response(req_headers)
            self._serve(flow, status, reason, headers, rbody, method)
            self._log(method, url, "canonical", status, matched=None, kind=kind)
            return
        if result.capture is None:
            if self.miss == "live":
                flow.metadata["ego2web"] = "live"
                self._log(method, url, "live", None, kind=kind)
                return
            try:
                code = int(self.miss)
            except ValueError:
                code = 404
            status, reason, headers, rbody = miss_response(url, method, code)
            self._serve(flow, status, reason, headers, rbody, method)
            self._log(method, url, "miss", status, kind=kind)
            return
        ref = result.capture.ref
        try:
            status, reason, headers, rbody = self._prepared(ref)
        except Exception as e:  # noqa: BLE001 - a bad record fails this request only
            log.error("ego2web-replay: cannot read the capture for %s: %s", url, e)
            flow.metadata["ego2web"] = "replayed"
            flow.response = http.Response.make(
                502, f"ego2web-replay: archived record unreadable: {e}\n".encode(),
                {"Content-Type": "text/plain", REPLAY_HEADER: "error", "Cache-Control": "no-store"})
            self._log(method, url, "miss", 502, matched=result.capture.url, kind=kind)
            return
        if conditional(req_headers, status, headers):
            status, reason, headers, rbody = not_modified_response(headers)
        else:
            rng = _header(req_headers, "range")
            if rng and status == 200:
                status, headers, rbody = apply_range(status, headers, rbody, rng)
                reason = reason_phrase(status)
            elif self.freeze_script and status == 200 and method in ("GET", "HEAD") and inject_allowed(headers):
                rbody, headers = self._injected(ref, rbody, headers)
            elif status == 200 and result.outcome != "exact" and result.capture.url != url:
                rbody, headers = _rename_jsonp(rbody, headers, result.capture.url, url)
        headers = shift_dates(headers, datetime.now(UTC))
        if result.outcome == "fuzzy":  # another page's content: say so (diagnosis only); hits gain no header
            headers = _set_header(headers, REPLAY_HEADER, result.outcome)
        self._serve(flow, status, reason, headers, rbody, method)
        self._log(method, url, result.outcome, status, matched=result.capture.url, score=result.score, kind=kind)

    # -- archived responses, read once ----------------------------------------
    def _remember(self, key: Any, value: Any, size: int) -> None:
        with self._lock:
            if self._cached_bytes + size > CACHE_BYTES:
                self._cache.clear()
                self._cached_bytes = 0
            self._cache[key] = value
            self._cached_bytes += size

    def _prepared(self, ref: Any) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """The archived response for a capture, headers cleaned; kept in memory (bounded)."""
        hit = self._cache.get(("r", ref))
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        status, reason, headers, body = self.resolve(ref)
        if _chunked_without_length(headers):  # sent chunked live: its Transfer-Encoding stays where it was
            cleaned = [(k, "chunked") if k.lower() == "transfer-encoding" else (k, v)
                       for k, v in clean_response_headers(headers, keep=("transfer-encoding",))]
            cleaned = _dedupe_header(cleaned, "transfer-encoding")
        else:
            cleaned = clean_response_headers(headers)
        value = (status, reason or reason_phrase(status), cleaned, body)
        self._remember(("r", ref), value, len(body))
        return value

    def _injected(self, ref: Any, body: bytes, headers: list[tuple[str, str]]) -> tuple[bytes, list[tuple[str, str]]]:
        hit = self._cache.get(("i", ref))
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        from .freeze import inject_into_html

        value = inject_into_html(body, headers, self.freeze_script or "")
        if _chunked_without_length(headers):  # the rewritten page is still served chunked, as it was live
            value = (value[0], [(k, v) for k, v in value[1] if k.lower() != "content-length"]
                     + [("Transfer-Encoding", "chunked")])
        self._remember(("i", ref), value, len(value[0]))
        return value

    @staticmethod
    def _serve(flow: Any, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
               method: str) -> None:
        from mitmproxy import http

        fields = tuple((k.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for k, v in headers)
        resp = http.Response(
            http_version=b"HTTP/1.1", status_code=status, reason=reason.encode("latin-1", "replace"),
            headers=http.Headers(fields), content=None, trailers=None,
            timestamp_start=time.time(), timestamp_end=time.time())
        if method != "HEAD":
            resp.raw_content = body
            if "chunked" in resp.headers.get("transfer-encoding", "").lower():
                resp.headers.pop("Content-Length", None)  # served chunked, as the live page got it
            elif status not in (204, 304) and not (100 <= status < 200):
                resp.headers["Content-Length"] = str(len(body))
        flow.metadata["ego2web"] = "replayed"
        flow.response = resp
