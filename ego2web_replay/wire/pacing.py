"""The connection side of the wire's bounds (:mod:`.budget`): what one client connection holds, and for how long.

:class:`Bounded` is the base of the proxy's connection (``conn._Conn``): it keeps the
connection's phase and since when (for the :class:`~.budget.Sweeper`), charges the body
bytes its HTTP handler holds to the proxy's :class:`~.budget.BodyBudget` (answering 503
past it), holds each answer still to come (its body charged until it is done; cancelled
when the connection goes, which stops the recorder's upstream fetch), paces HTTP/1.1
answers (at most ``max_pipelined`` per turn of the loop, none while the client leaves its
answers unread), stops reading while it cannot answer, and ends the connection on a timeout
with the answer its phase allows.

What it asks of the connection: ``front`` (``limits``, ``budget``, ``refused``), ``loop``,
``transport``, ``app`` (an :class:`~.h1.H1Handler` or :class:`~.h2conn.H2Handler`, each with
``phase()`` and ``buffered()``), ``tls`` and ``sniff`` (a tunnel not yet in TLS), ``write``
and ``close``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from .h1 import error_reply, head_bytes
from .h2conn import H2Handler
from .reply import Reply

__all__ = ["Bounded", "READ_AHEAD"]

#: Bytes an HTTP/1.1 connection may send past a request whose answer is still to come before it is
#: no longer read (pipelined requests wait in the kernel's buffers then).
READ_AHEAD = 64 * 1024


_OPENED = itertools.count()  # connections in the order they were accepted


class Bounded(asyncio.Protocol):
    """Per-connection bookkeeping of the bounds and timeouts (see the module docstring)."""

    front: Any
    loop: asyncio.AbstractEventLoop
    transport: Any
    app: Any
    tls: Any
    sniff: bool
    write: Callable[[bytes], None]  # the connection's own (wire/conn.py)
    close: Callable[[], None]

    def init_bounds(self) -> None:
        now = self.loop.time()
        self.phase, self.phase_since, self.last_read, self.last_write = "head", now, now, now
        # ties in the loop's clock (uvloop's is cached per loop turn, to the millisecond) go to the older
        self.opened = next(_OPENED)
        self.requests = 0  # requests handed to the front
        self.charged = 0  # bytes the app holds of bodies still coming, charged to the budget
        self.held: dict[asyncio.Future[Reply], int] = {}  # answers to come, with the body bytes each holds
        self.deferred: list[tuple[asyncio.Future[Reply], Reply]] = []  # HTTP/1.1 answers held back (pacing)
        self.burst = 0  # HTTP/1.1 answers given in this turn of the loop
        self.write_paused = False  # the client is not reading what was written
        self.counted = False  # in the front's connections (not refused at the cap)
        self.ended = False  # refused or ended by the proxy: nothing more is read

    # -- the connection's start and end --------------------------------------------------
    def admit(self, transport: Any) -> bool:
        """Whether the new connection is taken: under the cap, or room made; else it is answered 503."""
        front = self.front
        if len(front.connections) < front.max_connections or front.make_room():
            self.counted = True
            front.connections.add(self)
            return True
        front.refused["connections"] += 1
        self.ended = True
        reply = error_reply(503, f"too many connections (the cap is {front.max_connections}); try again",
                            [("Retry-After", "1"), ("Connection", "close")])
        transport.write(head_bytes(reply) + reply.body)
        if transport.can_write_eof():  # the client reads the answer; what it sent is read and dropped
            transport.write_eof()
            self.loop.call_later(min(1.0, front.limits.head_timeout_s), transport.abort)
        else:
            transport.close()
        return False

    def stop_streams(self) -> None:
        """Stop the bodies still streaming to this client (``app.lost()``, wire/stream.py): an answer whose
        head was sent is no longer cancelled but ends its recording as the client left it."""
        lost = getattr(self.app, "lost", None)
        if lost is not None:
            lost()

    def release_all(self) -> None:
        """The connection is gone: cancel its answers still to come, give its bytes back."""
        self.front.connections.discard(self)
        for future in [*self.held, *(f for f, _ in self.deferred)]:
            future.cancel()  # nobody will read the answer (the recorder's upstream fetch stops too)
        self.deferred.clear()
        self.front.budget.change(-self.charged)
        self.charged = 0

    # -- answers -----------------------------------------------------------------------------
    def paced_h1(self, reply: Reply | Awaitable[Reply], body: int) -> Reply | Awaitable[Reply]:
        """An HTTP/1.1 answer as the connection gives it: held while to come; held back past the
        turn's pipelining cap, or while the client leaves answers unread."""
        if not isinstance(reply, Reply):
            self.requests += 1
            return self._hold(reply, body)
        if not self.may_answer():
            self.requests += 1
            later: asyncio.Future[Reply] = self.loop.create_future()  # given when the client reads, or next turn
            self.deferred.append((later, reply))
            self._reading()
            return later
        self.answered()
        return reply

    def may_answer(self) -> bool:
        """Whether an HTTP/1.1 answer given now goes out now (the client reads, the turn's cap not reached)."""
        return not self.write_paused and self.burst < self.front.limits.max_pipelined

    def answered(self) -> None:
        """Count an HTTP/1.1 answer that goes out now (:meth:`may_answer`) in the requests and the turn's burst."""
        self.requests += 1
        if not self.burst:
            self.loop.call_soon(self._end_burst)
        self.burst += 1

    def paced_h2(self, reply: Reply | Awaitable[Reply], body: int) -> Reply | Awaitable[Reply]:
        self.requests += 1
        return reply if isinstance(reply, Reply) else self._hold(reply, body)

    def _hold(self, reply: Awaitable[Reply], body: int) -> asyncio.Future[Reply]:
        """An answer to come: its body bytes stay charged to the budget until it is done."""
        future = reply if isinstance(reply, asyncio.Future) else asyncio.ensure_future(reply)
        self.held[future] = body
        self.front.budget.change(body)
        future.add_done_callback(self._unhold)
        self._reading()
        return future

    def _unhold(self, future: asyncio.Future[Reply]) -> None:
        self.front.budget.change(-self.held.pop(future, 0))
        self._reading()

    def _end_burst(self) -> None:
        self.burst = 0
        self._release()

    def _release(self) -> None:
        """Give the answer held back for pacing, once the client reads and the turn is over."""
        if self.write_paused or not self.deferred or self.burst >= self.front.limits.max_pipelined:
            return
        future, reply = self.deferred.pop(0)
        self._reading()
        if not future.done():
            future.set_result(reply)

    def _reading(self) -> None:
        """Read on unless the client leaves answers unread, or an HTTP/1.1 answer is held back, or one
        is still to come and the client has sent more than :data:`READ_AHEAD` past it meanwhile (short
        of that, reading goes on, so a client that closes is seen and its answer cancelled)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        waiting = not isinstance(self.app, H2Handler) and self.app is not None and bool(
            self.deferred or (self.held and self.app.buffered() > READ_AHEAD))
        want = not self.write_paused and not waiting
        if want != t.is_reading():
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._reading()
        self._release()

    # -- the budget, phases and timeouts ----------------------------------------------------
    def account(self) -> None:
        """Charge the budget with the body bytes held now (past it, refuse the request that grew);
        stop reading when the connection holds too much ahead of an answer to come."""
        held = self.app.buffered() if self.app is not None and not self.ended else 0
        delta = held - self.charged
        if self.held:
            self._reading()
        if not delta:
            return
        self.charged = held
        if self.front.budget.change(delta) or delta < 0:
            return
        self.front.refused["body-budget"] += 1
        reply = error_reply(503, f"the proxy's memory for request bodies ({self.front.limits.body_budget} bytes) "
                                 "is in use; try again", [("Retry-After", "1")])
        if isinstance(self.app, H2Handler):
            self.app.refuse_largest(reply)  # that stream goes, the connection goes on
            self.account()
            return
        self.end(reply)

    def end(self, reply: Reply | None) -> None:
        """End the connection: drop what it holds, answer ``reply`` (if any), then close our side.
        With an answer, what the client still sends is read and dropped until it closes (a closed
        socket with unread bytes would reset the connection, and the client might lose the answer),
        for at most the head timeout (phase ``lingering``)."""
        self.ended = True
        for future in [*self.held, *(f for f, _ in self.deferred)]:
            future.cancel()
        self.deferred.clear()
        self.stop_streams()
        self.app = None
        self.account()
        if reply is not None:
            self.write(head_bytes(reply._replace(headers=[*reply.headers, ("Connection", "close")])) + reply.body)
        if reply is not None and self.transport.can_write_eof():
            self.transport.write_eof()
        else:
            self.close()

    def current_phase(self) -> str:
        """Where the connection stands (the table of :mod:`.budget`), or ``closed``."""
        if self.transport is None or self.transport.is_closing():
            return "closed"
        if self.ended:
            return "lingering"
        if self.write_paused:
            return "stalled"
        if self.sniff or (self.tls is not None and not self.tls.ready):
            return "head"
        phase = str(self.app.phase())
        if phase == "done":
            return "closed"
        return "head" if phase == "idle" and not self.requests else phase

    def expire(self, phase: str) -> None:
        """End the connection for a timeout (or to make room: ``evicted``), as the phase allows."""
        self.front.refused[f"timeout-{phase}" if phase != "evicted" else phase] += 1
        if phase in ("stalled", "lingering"):
            self.ended = True
            self.transport.abort()  # what is unsent stays unsent: the client does not read
        elif isinstance(self.app, H2Handler):
            self.ended = True
            self.app.goaway()
        elif phase in ("head", "body") and not self.sniff and (self.tls is None or self.tls.ready):
            limit = self.front.limits.head_timeout_s if phase == "head" else self.front.limits.body_timeout_s
            what = "request head" if phase == "head" else "request body (no progress)"
            self.end(error_reply(408, f"{what} not received within {limit:g} s"))
        else:
            self.end(None)
