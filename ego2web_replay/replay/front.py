"""The fast replay front end: the proxy wire (:mod:`ego2web_replay.wire`) answering from a snapshot.

A proxy for replay only, so it never connects anywhere: CONNECT is answered at once,
TLS is terminated with leaves minted from the project CA, HTTP/1.1 and HTTP/2 are
read by :mod:`ego2web_replay.wire`. Every request goes to the upstream-guard policy
(Chromium's background hosts are answered by the proxy) and then to the
:class:`~.responder.Responder` that the mitmproxy engine uses too: same matching,
stats, log, misses, freeze, redaction, bytes.
"""

from __future__ import annotations

from typing import Any

from ..errors import ReplayError
from ..guard import GuardPolicy
from ..proxy import ProjectCA
from ..wire.budget import WireLimits
from ..wire.conn import ProxyFront, bind_socket, settle_future
from .responder import Reply, Responder

__all__ = ["FrontServer", "bind_socket", "settle_future"]


class FrontServer(ProxyFront):
    """The fast replay proxy on ``host:port`` (0: any free port), answering through ``responder``."""

    def __init__(self, responder: Responder, *, ca: ProjectCA, host: str = "127.0.0.1", port: int = 0,
                 guard: GuardPolicy | None = None, http2: bool = True, limits: WireLimits | None = None) -> None:
        if responder.miss == "live":
            raise ReplayError("miss=live forwards requests upstream: the fast engine never does; "
                              "use --engine mitmproxy")
        super().__init__(ca=ca, guard=guard or GuardPolicy(mode="open"), host=host, port=port, http2=http2,
                         limits=limits)
        self.responder = responder

    @property
    def responder(self) -> Responder:
        """What answers requests; set another (a new episode's) and the answers kept to repeat are dropped."""
        return self._responder

    @responder.setter
    def responder(self, responder: Responder) -> None:
        self._responder = responder
        self.repeats.clear()

    def repeat(self, again: Any) -> bytes | None:
        """Only the responder that made ``again`` answers through it (another episode's never logs here)."""
        return again() if getattr(again, "responder", None) is self._responder else None

    def reply(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Reply:
        """The guard's answer for a host the proxy never contacts, else the responder's."""
        host, ok, why = self.allowed(url)
        if not ok:
            return self.responder.blocked(host, why, method.upper())
        return self.responder.answer(method, url, headers, body)
