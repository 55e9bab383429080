"""Plain GETs answered again: the framed reply of a capture, kept for the second its dates say.

A GET matched exactly, with no Range and no validators, gets the same reply from one capture for
the whole second (its dates are moved to the second's). :class:`KeptReplies` keeps that reply once
it has been framed, with its HTTP/1.1 head serialised once (``Reply.head``), so that each later
request in the same second is a match, a lookup and a log entry (:meth:`KeptReplies.hit`). A reply
kept this way carries a ticket (``Reply.again``, an :class:`Again`): the wire calls it with no
arguments to answer the very same head again without parsing or matching it anew
(:meth:`KeptReplies.again`), still counted and logged as the slow path would, and only when
matching would pick the same capture now.

The :class:`~.responder.Responder` decides what may be kept (captures of streamed bodies, recorded
206s and chunked replies never are) and owns the counts and the log; this module only holds the
replies, bounded in number (``max_replies``) and in the bytes of their joined copies (``joined_bytes``).
Entries are flat tuples of strings, bytes and numbers, so the collector stops tracking them (a
:class:`Reply` is a tuple subclass it never stops tracking).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire.h1 import head_bytes
from ..wire.reply import Reply
from .matching import MatchResult

__all__ = ["Again", "KeptReplies"]

Log = Callable[..., None]  # Responder._log


class Again:
    """A plain GET answered from the kept reply of the capture it matched exactly (``Reply.again``):
    calling it answers the same request again (:meth:`KeptReplies.again`). ``responder`` is the
    responder that made it: a front answers only its own responder's tickets."""

    __slots__ = ("responder", "kept", "url", "kind", "matched", "score", "position", "key")

    def __init__(self, responder: Any, kept: KeptReplies, url: str, kind: str, result: MatchResult,
                 key: tuple[Any, ...]) -> None:
        assert result.capture is not None and result.position is not None
        self.responder, self.kept, self.url, self.kind, self.key = responder, kept, url, kind, key
        self.matched, self.score, self.position = result.capture.url, result.score, result.position

    def __call__(self) -> bytes | None:
        return self.kept.again(self)


class KeptReplies:
    """The kept replies of one responder, by capture key. ``session.again`` says whether matching
    would pick a capture now; ``log`` is the responder's log (one entry per answer); ``clock`` the
    current second as the responder's dates count it."""

    def __init__(self, responder: Any, session: Any, log: Log, clock: Callable[[], int], *, max_replies: int,
                 joined_bytes: int) -> None:
        self._responder, self._session, self._log, self._clock = responder, session, log, clock
        self._max, self._joined_cap = max_replies, joined_bytes
        self._replies: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._joined = 0  # bytes of the replies' joined copies (head + body)

    def clear(self) -> None:
        """Forget every kept reply (their bodies are the responder's cache's: they go with it)."""
        self._replies.clear()
        self._joined = 0

    def hit(self, method: str, url: str, result: MatchResult, kind: str, key: tuple[Any, ...],
            second: int) -> Reply | None:
        """The reply kept this ``second`` for the capture ``key`` that ``result`` matched, logged as a hit;
        None when there is none (the responder frames one)."""
        assert result.capture is not None
        hit = self._replies.get(key)
        if hit is None or hit[0] != second:
            return None
        _second, status, reason, headers, body, tag, head, _wire = hit
        again = Again(self._responder, self, url, kind, result, key)
        reply = Reply(status, reason, list(headers), body, False, tag, None, None, head, again)
        volatile = f"{result.via}: {', '.join(result.ignored)}" if result.via else None
        self._log(method, url, result.outcome, reply.status, matched=result.capture.url, score=result.score,
                  kind=kind, volatile=volatile)
        return reply

    def keep(self, key: tuple[Any, ...], second: int, reply: Reply, url: str, kind: str,
             result: MatchResult) -> Reply:
        """Keep ``reply`` (framed for ``second``) under ``key``; it is returned with its head serialised
        and its ticket (``again``). The head and body are joined once (what :meth:`again` sends) while
        the joined copies stay under ``joined_bytes``."""
        replies = self._replies
        if len(replies) >= self._max:
            self.clear()
        head = head_bytes(reply)
        old = replies.get(key)
        if old is not None and old[7] is not None:
            self._joined -= len(old[7])
        wire = None
        if self._joined + len(head) + len(reply.body) <= self._joined_cap:
            wire = head + reply.body
            self._joined += len(wire)
        replies[key] = (second, reply.status, reply.reason, tuple(reply.headers), reply.body, reply.tag, head, wire)
        return reply._replace(head=head, again=Again(self._responder, self, url, kind, result, key))

    def again(self, ticket: Again) -> bytes | None:
        """The HTTP/1.1 bytes of the plain GET ``ticket`` was made for, answered again and logged (the kept
        reply of its capture, for this second, when matching would pick that capture now); None, with
        nothing done, when the responder has to decide anew."""
        hit = self._replies.get(ticket.key)
        if hit is None or hit[0] != self._clock() or not self._session.again("GET", ticket.url, ticket.position):
            return None
        self._log("GET", ticket.url, "exact", hit[1], matched=ticket.matched, score=ticket.score, kind=ticket.kind)
        wire: bytes | None = hit[7]
        return wire if wire is not None else hit[6] + hit[4]
