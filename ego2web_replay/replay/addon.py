"""The replay as a mitmproxy addon (``--engine mitmproxy``): never opens an upstream connection.

Only carries requests to :class:`~.responder.Responder` and its replies back:
what is answered, counted and logged is decided there, for both engines. The
one thing only this engine does is ``miss=live`` (diagnosis only): a reply tagged
``live`` is left unanswered, so mitmproxy forwards the request upstream.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..models import ReplayStats
from .matching import IndexBase
from .responder import MAX_LOG, REPLAY_HEADER, Reply, Responder

__all__ = ["Replayer", "REPLAY_HEADER", "MAX_LOG"]


class Replayer:
    """mitmproxy addon serving captures through a :class:`Responder` (built from the same arguments)."""

    def __init__(self, index: IndexBase | None = None, resolve: Any = None, *, responder: Responder | None = None,
                 miss: str = "404", freeze_script: str | None = None, policy: str = "sequence",
                 snapshots: Sequence[str] = (), redactor: Any = None) -> None:
        if responder is None:
            assert index is not None
            responder = Responder(index, resolve, miss=miss, freeze_script=freeze_script, policy=policy,
                                  snapshots=snapshots, redactor=redactor)
        self.responder = responder

    @property
    def index(self) -> IndexBase:
        return self.responder.index

    @property
    def stats(self) -> ReplayStats:
        return self.responder.stats

    def snapshot_stats(self) -> ReplayStats:
        return self.responder.snapshot_stats()

    # -- hooks ---------------------------------------------------------------
    def server_connect(self, data: Any) -> None:
        if self.responder.miss != "live":
            data.server.error = "ego2web-replay: hermetic replay never connects upstream"

    def request(self, flow: Any) -> None:
        if flow.response is not None:  # answered by the guard
            if flow.metadata.get("ego2web") == "blocked":
                self.responder.count_blocked()
            return
        req = flow.request
        headers = [(k, v) for k, v in req.headers.items(multi=True)]
        reply = self.responder.answer(req.method, req.pretty_url, headers, req.raw_content or b"")
        if reply.tag == "live":
            flow.metadata["ego2web"] = "live"
            return
        flow.metadata["ego2web"] = "replayed"
        flow.response = _response(reply, head=req.method.upper() == "HEAD", http10=req.http_version == "HTTP/1.0")


def _response(reply: Reply, head: bool, http10: bool = False) -> Any:
    """A mitmproxy response carrying exactly the reply's head and bytes. A reply served chunked goes to
    an HTTP/1.0 client with its length instead (RFC 9112 6.1: no chunked coding to a client that cannot
    read it), as the fast engine ends such a body by closing the connection."""
    from mitmproxy import http

    headers = reply.headers
    if http10 and any(k.lower() == "transfer-encoding" for k, _ in headers):
        headers = [(k, v) for k, v in headers if k.lower() not in ("transfer-encoding", "content-length")]
        if not head:
            headers.append(("Content-Length", str(len(reply.body))))
    fields = tuple((k.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for k, v in headers)
    now = time.time()
    resp = http.Response(http_version=b"HTTP/1.1", status_code=reply.status,
                         reason=reply.reason.encode("latin-1", "replace"), headers=http.Headers(fields),
                         content=None, trailers=None, timestamp_start=now, timestamp_end=now)
    if not head:
        resp.raw_content = reply.body
    return resp
