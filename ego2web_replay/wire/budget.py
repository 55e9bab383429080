"""The bounds and timeouts of the proxy wire, held against clients that never finish (docs/limits.md).

:class:`WireLimits` says them (defaults, each overridable by an environment variable and by the
``serve``/``record``/``run`` options); :class:`BodyBudget` is the proxy's total for request bodies
held in memory; :class:`Sweeper` walks the connections a few times a second and ends those past a
timeout (the per-connection side, accounting, pacing and expiry, is :mod:`.pacing`); :func:`raise_nofile` lifts the descriptor limit to the hard limit at start-up, and
:func:`connection_cap` keeps the connection cap under what the descriptors allow.

A connection says where it stands through ``phase()`` (see :class:`Watched`):

=============  =====================================================================  ==============
phase          what the connection is doing                                           timeout
=============  =====================================================================  ==============
``head``       no request read yet (TLS handshake included) or part of a head read    head (total)
``body``       a head read, its body still coming                                     body (progress)
``idle``       between requests of a kept-alive connection                            idle
``answering``  an answer is on its way (the recorder waiting for the origin)          none here
``stalled``    answers written that the client does not read                          body (progress)
``sending``    HTTP/2 answers waiting for the client's flow-control windows           body (progress)
``tunnel``     a websocket passed through as raw bytes                                none
``lingering``  refused or timed out, answered; what the client still sends is dropped  head (total)
=============  =====================================================================  ==============
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from ..errors import ProxyError

__all__ = ["WireLimits", "BodyBudget", "Sweeper", "Watched", "raise_nofile", "connection_cap", "ENV"]

#: The environment variable of each limit (the default of every proxy started in this process).
ENV = {
    "max_connections": "EGO2WEB_WIRE_MAX_CONNECTIONS",
    "body_budget": "EGO2WEB_WIRE_BODY_BUDGET",
    "max_pipelined": "EGO2WEB_WIRE_MAX_PIPELINED",
    "max_streams": "EGO2WEB_WIRE_MAX_STREAMS",
    "cert_cache": "EGO2WEB_WIRE_CERT_CACHE",
    "head_timeout_s": "EGO2WEB_WIRE_HEAD_TIMEOUT",
    "idle_timeout_s": "EGO2WEB_WIRE_IDLE_TIMEOUT",
    "body_timeout_s": "EGO2WEB_WIRE_BODY_TIMEOUT",
}
_NOFILE_CEILING = 1 << 20  # a hard limit of "unlimited" is lifted to this many descriptors
_NOFILE_RESERVE = 64  # descriptors kept for everything else (archives, upstream connections, the index)


@dataclass(frozen=True)
class WireLimits:
    """What one fast proxy holds at most, and how long it waits (docs/limits.md has the why)."""

    max_connections: int = 4096
    """Client connections at once; past it the longest-silent connection with no request in progress is
    closed for the newcomer, or, when none is, the newcomer is answered 503 and closed."""
    body_budget: int = 512 << 20
    """Bytes of request bodies held in memory by the whole proxy (being read, or sent upstream); the
    request whose body would pass it is answered 503."""
    max_pipelined: int = 64
    """Requests of one HTTP/1.1 connection answered in one turn of the event loop; none is answered
    while the client leaves a write buffer's worth (64 KiB) of answers unread."""
    max_streams: int = 100
    """Concurrent HTTP/2 streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS)."""
    cert_cache: int = 1000
    """Leaf certificates kept (least recently used dropped)."""
    head_timeout_s: float = 30.0
    """From a connection's start, or a head's first byte, until the request head (and TLS) is read."""
    idle_timeout_s: float = 120.0
    """A kept-alive connection with no request, between requests."""
    body_timeout_s: float = 60.0
    """A request body with no new byte, or answers the client does not read, for this long."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise ValueError(f"wire limit {f.name} must be positive, not {value!r}")

    @classmethod
    def from_env(cls, **overrides: Any) -> WireLimits:
        """The defaults, each replaced by its environment variable (:data:`ENV`) when set, then by
        ``overrides`` that are not None. A bad value is one :class:`ProxyError` line naming it."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = os.environ.get(ENV[f.name], "").strip()
            if raw:
                kind = float if f.name.endswith("_s") else int
                try:
                    values[f.name] = kind(raw)
                except ValueError:
                    raise ProxyError(f"{ENV[f.name]}={raw!r} is not a number") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValueError as e:
            raise ProxyError(str(e)) from None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def tick_s(self) -> float:
        """How often the sweeper looks: a quarter of the shortest timeout, between 20 ms and 1 s."""
        return min(1.0, max(0.02, min(self.head_timeout_s, self.idle_timeout_s, self.body_timeout_s) / 4))


def raise_nofile() -> int:
    """Lift this process's soft descriptor limit to its hard limit; the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return _NOFILE_CEILING if soft == resource.RLIM_INFINITY else soft


def connection_cap(limits: WireLimits, nofile: int) -> int:
    """The connection cap in force: the configured one, kept under the descriptors there are (a client
    connection is one, and the rest of the proxy needs some), so the cap answers before ``accept`` fails."""
    room = nofile - max(_NOFILE_RESERVE, nofile // 8)
    return max(1, min(limits.max_connections, room))


class BodyBudget:
    """The request-body bytes a proxy holds, against one total (``cap``); one event loop touches it."""

    def __init__(self, cap: int) -> None:
        self.cap, self.used, self.refused = cap, 0, 0

    def change(self, delta: int) -> bool:
        """Add ``delta`` (negative: given back); whether the total is within the cap after."""
        self.used += delta
        return self.used <= self.cap


class Watched(Protocol):
    """What the sweeper asks of a connection."""

    phase: str
    phase_since: float
    last_read: float

    def current_phase(self) -> str: ...

    def expire(self, phase: str) -> None: ...

    def account(self) -> None: ...


class Sweeper:
    """Every :attr:`WireLimits.tick_s`, notes each connection's phase and ends those past its timeout
    (``expire(phase)``, which counts them)."""

    def __init__(self, limits: WireLimits, connections: Callable[[], Iterable[Watched]]) -> None:
        self.limits, self.connections = limits, connections
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.limits.tick_s)
            self.sweep(loop.time())

    def sweep(self, now: float) -> None:
        limits = self.limits
        for conn in list(self.connections()):
            conn.account()
            phase = conn.current_phase()
            if phase != conn.phase:
                conn.phase, conn.phase_since = phase, now
            if phase in ("head", "lingering"):
                over = now - conn.phase_since > limits.head_timeout_s
            elif phase == "idle":
                over = now - conn.phase_since > limits.idle_timeout_s
            elif phase in ("body", "sending"):
                over = now - max(conn.phase_since, conn.last_read) > limits.body_timeout_s
            elif phase == "stalled":
                over = now - conn.phase_since > limits.body_timeout_s
            else:
                over = False
            if over:
                conn.expire(phase)
