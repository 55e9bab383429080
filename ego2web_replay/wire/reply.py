"""One answer to one request, ready for the wire (both fast proxies build these)."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Reply", "Headers"]

Headers = list[tuple[str, str]]


class Reply(NamedTuple):
    """One answer, ready for the wire.

    ``headers`` carry the framing (Content-Length, or Transfer-Encoding: chunked when
    ``chunked``); ``body`` is what to send (empty for HEAD). ``tag`` says who answered:
    ``replayed``, ``blocked`` (the guard), ``live`` (forward upstream; mitmproxy only) or
    ``recorded`` (the recording front end). ``tunnel``, on a ``101`` only, carries the
    connection on as raw bytes after the head (a websocket the recorder passes through):
    it has ``start(write, close)``, ``send(data)`` and ``close()``. ``stream``, when set,
    sends the body as it comes instead of ``body`` (:mod:`.stream`: a response of the
    recorder streamed through, a recorded stream replayed with its timing); a front end
    that cannot stream sends ``body``. ``head``, when set, is the HTTP/1.1 status line and header
    block of exactly these ``status``, ``reason`` and ``headers``, serialised once (the replay's
    reply cache, :mod:`ego2web_replay.replay.responder`); a reply made from another by ``_replace``
    of any of those must leave it None (``_replace(..., head=None)``). ``again``, when set (only with
    ``head``), answers the very same request again without reading it anew: called with no arguments,
    it counts and logs the request as answering it would and returns the bytes to send, or returns None
    having done nothing (the request is then answered as any other); a reply made by ``_replace`` must
    leave it None too. The HTTP/1.1 wire keeps it by the request head's bytes
    (:meth:`ego2web_replay.wire.conn.ProxyFront.repeat`).
    """

    status: int
    reason: str
    headers: Headers
    body: bytes
    chunked: bool
    tag: str
    tunnel: Any = None
    stream: Any = None
    head: bytes | None = None
    again: Any = None
