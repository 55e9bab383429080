"""The recording addon: every exchange the proxy completes becomes a WARC request/response pair.

Bodies are archived exactly as they came off the wire (mitmproxy's
``raw_content``: content-encoding kept). A response that came chunked keeps its
headers as they were and is stored chunked again, so replay serves it chunked
and no Content-Length appears that the live page never got; any other response
gets a true Content-Length (:meth:`~ego2web_replay.snapshots.warc.ArchiveWriter.write_exchange`).
Credentials are redacted
(:mod:`ego2web_replay.redaction`: headers, Set-Cookie values, query and body
fields, URL userinfo) unless ``record_keep_credentials`` is set. A failed write stops the recording:
the failing flow is killed and every later request is refused, so no traffic
ever passes unrecorded. The engines hand their writes to the archive's writer thread
(:meth:`ExchangeArchive.archive_async`, :mod:`.writes`), so no record over 64 KiB is compressed on
the proxy's event loop; :meth:`ExchangeArchive.drain` waits for what is handed over there before the
snapshot is finalised. Request bytes that are not UTF-8 (a header value a page set
with ``fetch``, a raw byte in a hand-made request line) are archived as mitmproxy
holds them: a header value's bytes read as Latin-1, a URL's stray bytes percent-encoded.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO
from urllib.parse import quote

from ..redaction import DEFAULT_HEADERS, REDACTED, Redactor
from ..snapshots.volatility import Reload, reload_of
from ..snapshots.wsrecords import WsMessage, redact_message, write_conversation
from ..web import get_header
from .spool import SpoolFile
from .upstream import UpstreamError, read_back_head
from .writes import INLINE_BYTES, WriteQueue

__all__ = ["ExchangeArchive", "Recorder", "CREDENTIAL_HEADERS", "REDACTED", "redact_headers"]

log = logging.getLogger(__name__)

CREDENTIAL_HEADERS = DEFAULT_HEADERS


def redact_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Replace the values of credential headers (the default list), keeping their names and order."""
    return Redactor().header_list(headers)


def _fields(headers: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.fields]


class ExchangeArchive:
    """What both recording engines do with a completed exchange: redact it, write it, count it.

    ``writer`` has ``write_exchange(**fields)`` (:class:`ego2web_replay.snapshots.warc.ArchiveWriter`).
    The first failed write sets ``failed``: from then on the engine refuses every request.
    ``errors`` are upstream failures (URL: why, redacted), ``failures`` the same as
    (method, URL, why, epoch seconds) for the manifest; ``untrusted`` the hosts whose
    certificate failed verification.
    """

    def __init__(self, writer: Any, *, keep_credentials: bool = False, redactor: Redactor | None = None) -> None:
        self.writer = writer
        self.keep_credentials = keep_credentials
        self.redactor = redactor or Redactor()
        self.exchanges = 0
        self.payload_bytes = 0
        self.failed: str | None = None
        self.errors: list[str] = []
        self.failures: list[tuple[str, str, str, float]] = []
        self.untrusted: list[str] = []  # "host: why" for upstream certificates that failed verification
        self.truncated: list[str] = []  # "URL: reason" of streamed bodies archived cut (WARC-Truncated)
        self.divert: list[Reload] | None = None  # set: exchanges are noted here for learning, not archived
        self.writes = WriteQueue()  # the writer thread of the engines (archive_async)
        self._lock = threading.Lock()

    async def archive_async(self, **fields: Any) -> bool:
        """:meth:`archive` on the writer thread, after the writes handed over before it (:mod:`.writes`);
        the event loop forwards other exchanges meanwhile (an exchange under ``INLINE_BYTES``, with no
        write queued, is written at once instead). A ``response_body`` file is the writer's from
        then on: closed once written. A write that could not be done stops the recording, as a failed
        one does."""
        size, held = _sizes(fields)
        try:
            return await self.writes.run(functools.partial(self._archive_then_close, fields), held,
                                         inline=size < INLINE_BYTES)
        except Exception as e:  # noqa: BLE001 - any write failure stops the recording
            self._fail(f"cannot write the archive: {type(e).__name__}: {e}")
            return False

    def _archive_then_close(self, fields: dict[str, Any]) -> bool:
        body = fields.get("response_body")
        try:
            return self.archive(**fields)
        finally:
            if body is not None and not isinstance(body, bytes):
                body.close()

    def drain(self) -> None:
        """Wait until every write handed to the writer thread is done (before the snapshot is finalised);
        one that failed has set ``failed``."""
        self.writes.drain()

    def _fail(self, why: str) -> None:
        with self._lock:
            if self.failed is None:
                self.failed = why
                self.errors.append(why)
                log.error("ego2web-replay: %s", why)

    def archive(self, *, url: str, method: str, request_headers: list[tuple[str, str]], request_body: bytes,
                status: int, reason: str, response_headers: list[tuple[str, str]],
                response_body: bytes | BinaryIO, http_version: str, ip: str | None, started: float, authority: str | None = None,
                websocket: tuple[list[Any], bool] | None = None,
                warc_headers: list[tuple[str, str]] | None = None) -> bool:
        """Write one exchange (``started``: epoch seconds); False if the write failed (recording stopped).

        ``websocket``, for a ``101`` handshake, is its conversation (messages, truncated; the client's
        JSON messages redacted like request bodies), archived after the handshake (:func:`~ego2web_replay.snapshots.wsrecords.write_conversation`).

        A request with no Host header (HTTP/2 and /3 carry the host as ``:authority``) is
        archived with ``Host: authority`` first, when ``authority`` is given. ``warc_headers``
        go on the response record (a streamed body's truncation and timing: :mod:`.stream`).
        ``response_body`` may be a seekable file (a streamed body's spool), written in pieces.
        Safe to call from any thread; the engines call it on the writer thread (:meth:`archive_async`).
        """
        req_headers, resp_headers, req_body = list(request_headers), list(response_headers), request_body
        if not all(v.isascii() for _, v in req_headers) or not url.isascii():
            req_headers, url = [(k, _wire_text(v)) for k, v in req_headers], _wire_url(url)
        red = self.redactor if not self.keep_credentials else None
        if red is not None:
            req_type, req_enc = get_header(req_headers, "content-type"), get_header(req_headers, "content-encoding")
            req_headers, resp_headers = red.header_list(req_headers), red.header_list(resp_headers)
            url = red.url(url)
            req_body = red.body(req_type, req_body, req_enc)
            if websocket is not None:  # the client's JSON messages, like request bodies
                websocket = ([redact_message(red, m) for m in websocket[0]], websocket[1])
        if authority is not None and get_header(req_headers, "host") is None:
            req_headers.insert(0, ("Host", authority))
        if self.divert is not None:  # a record-time second load (see snapshots/volatility.py)
            if not isinstance(response_body, bytes):
                response_body.seek(0)
                response_body = response_body.read()
            noted = reload_of(method, url, get_header(req_headers, "content-type"), req_body, response_body)
            with self._lock:
                self.divert.append(noted)
            return True
        date = dt.datetime.fromtimestamp(started, dt.UTC).replace(tzinfo=None)
        try:
            with self._lock:
                if self.failed:
                    return False
                if websocket is not None:
                    write_conversation(self.writer, url=url, request_headers=req_headers, status=status,
                                       reason=reason, response_headers=resp_headers, messages=websocket[0],
                                       truncated=websocket[1], ip=ip, date=date,
                                       http_version=http_version or "HTTP/1.1")
                else:
                    self.writer.write_exchange(
                        url=url, method=method, request_headers=req_headers, request_body=req_body,
                        status=status, reason=reason, response_headers=resp_headers, response_body=response_body,
                        http_version=http_version or "HTTP/1.1", ip=ip, date=date,
                        **({"warc_headers": warc_headers} if warc_headers else {}))
                    cut = next((v for k, v in warc_headers or () if k == "WARC-Truncated"), None)
                    if cut is not None and len(self.truncated) < 1000:
                        self.truncated.append(f"{url}: {cut}")
                self.exchanges += 1
                self.payload_bytes += (len(response_body) if isinstance(response_body, bytes)
                                       else response_body.seek(0, 2))
        except Exception as e:  # noqa: BLE001 - any write failure stops the recording
            self._fail(f"cannot write the archive: {e}")
            return False
        return True

    def note_error(self, url: str, message: str, method: str = "GET") -> None:
        """An exchange that failed upstream (nothing archived): kept, redacted, for the report and the manifest."""
        if not self.keep_credentials:
            url, message = self.redactor.url(url), self.redactor.text(message)
        with self._lock:
            self.errors.append(f"{url}: {message}")
            if len(self.failures) < 1000:
                self.failures.append((method, url, message, time.time()))

    def note_untrusted(self, host: str, why: str) -> None:
        with self._lock:
            if len(self.untrusted) < 20:
                self.untrusted.append(f"{host}: {why}")


def _sizes(fields: dict[str, Any]) -> tuple[int, int]:
    """The bytes of an exchange handed to the writer (its bodies, a websocket's messages), and of them
    those it holds in memory (all but a spool's file)."""
    size = len(fields.get("request_body") or b"")
    websocket = fields.get("websocket")
    if websocket is not None:
        size += sum(len(m.data) for m in websocket[0])
    body = fields.get("response_body")
    if isinstance(body, bytes):
        return size + len(body), size + len(body)
    length = body.length if isinstance(body, SpoolFile) else 0
    return size + length, size + (length if isinstance(body, SpoolFile) and body.in_memory else 0)


def _exchange(flow: Any) -> dict[str, Any]:
    """The fields :meth:`ExchangeArchive.archive` takes, from a mitmproxy flow."""
    req, resp = flow.request, flow.response
    h2 = req.http_version.startswith("HTTP/2") or req.http_version.startswith("HTTP/3")
    peer = flow.server_conn.peername
    return dict(url=req.pretty_url, method=req.method, request_headers=_fields(req.headers),
                request_body=req.raw_content or b"", status=resp.status_code, reason=resp.reason or "",
                response_headers=_fields(resp.headers), response_body=resp.raw_content or b"",
                http_version=resp.http_version or "HTTP/1.1", ip=peer[0] if peer else None,
                started=req.timestamp_start, authority=(req.authority or req.pretty_host) if h2 else None)


def _wire_text(text: str) -> str:
    """``text`` as a writable string: bytes that came undecodable (surrogate escapes) make it all Latin-1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("latin-1")
    return text


def _wire_url(url: str) -> str:
    """``url`` with every byte past ASCII percent-encoded, UTF-8 or not (a URL is ASCII on the wire and in
    WARC-Target-URI; a client may send raw UTF-8 in a path or query)."""
    if url.isascii():
        return url
    return quote(url.encode("utf-8", "surrogateescape"), safe="!#$%&'()*+,/:;=?@[]~")



class Recorder(ExchangeArchive):
    """mitmproxy addon writing each completed exchange through :class:`ExchangeArchive`.

    ``on_exchange(flow)`` is called after each record pair is written.
    """

    def __init__(self, writer: Any, *, keep_credentials: bool = False,
                 on_exchange: Callable[[Any], None] | None = None, redactor: Redactor | None = None) -> None:
        super().__init__(writer, keep_credentials=keep_credentials, redactor=redactor)
        self.on_exchange = on_exchange

    def load(self, loader: Any) -> None:
        loader.add_option("record_keep_credentials", bool, self.keep_credentials,
                          "Keep Authorization, Cookie and Proxy-Authorization values in the archive.")

    def configure(self, updated: set[str]) -> None:
        from mitmproxy import ctx

        if "record_keep_credentials" in updated:
            self.keep_credentials = ctx.options.record_keep_credentials

    def request(self, flow: Any) -> None:
        from mitmproxy import http

        if self.failed and flow.response is None:
            flow.metadata["ego2web"] = "refused"
            flow.response = http.Response.make(
                502, f"ego2web-replay: recording stopped ({self.failed})\n".encode(),
                {"Content-Type": "text/plain", "X-Ego2Web-Replay": "recording-failed"})

    def responseheaders(self, flow: Any) -> None:
        """The origin's head, read by mitmproxy, read again with the fast engine's grammar
        (:func:`~.upstream.read_back_head`). One refused is noted among the errors, its body read and
        dropped, its connection to the origin closed after it (never reused), and the client gets a 502
        (:meth:`response`); nothing of it is archived. A folded value is joined, as the fast engine
        joins it, so the browser and the archive get one value (mitmproxy would pass the fold on)."""
        if flow.metadata.get("ego2web") or flow.response is None or self.failed:
            return
        resp = flow.response
        version = resp.http_version
        if version == "HTTP/2.0" and getattr(flow.server_conn, "alpn", None) == b"h2":
            version = "HTTP/1.1"  # framed by h2 (which refuses controls in fields): the fields are checked
        fields = _fields(resp.headers)
        try:
            head = read_back_head(version, resp.status_code, resp.data.reason.decode("latin-1"), fields)
        except UpstreamError as e:
            flow.metadata["ego2web"] = "refused-head"
            flow.metadata["ego2web_why"] = str(e)
            resp.headers["Connection"] = "close"  # the origin's connection ends with this response
            self.note_error(flow.request.pretty_url, str(e), flow.request.method)
            return
        if head.headers != fields:
            resp.headers.fields = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in head.headers)

    async def response(self, flow: Any) -> None:
        if flow.metadata.get("ego2web") == "refused-head":
            from mitmproxy import http

            why = flow.metadata.get("ego2web_why", "")
            flow.response = http.Response.make(
                502, f"ego2web-replay: upstream {flow.request.host}: {why}\n".encode(),
                {"Content-Type": "text/plain; charset=utf-8", "X-Ego2Web-Replay": "upstream-error; kind=protocol"})
            return
        if flow.metadata.get("ego2web") or flow.response is None or self.failed:
            return  # answered by the guard, a replay or a refusal: nothing came from upstream
        if flow.websocket is not None:
            return  # archived with its conversation when it ends (websocket_end)
        if not await self.archive_async(**_exchange(flow)):
            flow.kill()
            return
        if self.on_exchange is not None:
            self.on_exchange(flow)

    async def websocket_end(self, flow: Any) -> None:
        """A websocket ended: its handshake and conversation are archived (snapshots/wsrecords.py)."""
        if flow.metadata.get("ego2web") or flow.response is None or self.failed:
            return
        ws, start = flow.websocket, flow.request.timestamp_start
        messages = [WsMessage((m.timestamp or start) - start, "client" if m.from_client else "server",
                              "text" if m.is_text else "binary", m.content) for m in ws.messages]
        if ws.close_code is not None:
            side = "client" if ws.closed_by_client else "server"
            messages.append(WsMessage((ws.timestamp_end or start) - start, side, "close",
                                      struct.pack("!H", ws.close_code) + (ws.close_reason or "").encode()))
        await self.archive_async(**_exchange(flow), websocket=(messages, False))

    def tls_failed_server(self, data: Any) -> None:
        """An upstream TLS handshake failed: keep certificate problems for a clear recording error."""
        conn = getattr(data, "conn", None)
        why = str(getattr(conn, "error", "") or "")
        if "certificate" in why.lower():
            host = getattr(conn, "sni", None) or (getattr(conn, "address", None) or ("?",))[0]
            self.note_untrusted(str(host), why)

    def error(self, flow: Any) -> None:
        if flow.error and not flow.metadata.get("ego2web"):
            self.note_error(flow.request.pretty_url, flow.error.msg, flow.request.method)
