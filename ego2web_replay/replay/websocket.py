"""Replaying a websocket: the handshake matched like a request, the server's messages played to the client's.

A handshake (``Upgrade: websocket``) is matched like any ``GET`` (exact, canonical,
learned; :mod:`.matching`) against the archived ``101`` captures; the capture's
conversation (:mod:`ego2web_replay.snapshots.wsrecords`) is then played by
:class:`ReplayTunnel` on the client's connection:

* the server's messages recorded before the client's first message are sent at once;
* each recorded client message (text or binary) and the server's messages up to the
  next one form a *turn*. A message from the client is matched to the first unused
  turn whose message is the same bytes (``exact``), else, for JSON text, the same after
  dropping keys the host's rules or the recording's learned volatility call volatile
  (``canonical``); repeats beyond the recorded ones get the last such turn again (the
  ``sequence`` policy of HTTP), logged ``again: past N recorded`` and counted when the
  recorded turns answered differently (:data:`~ego2web_replay.validity.AGAIN`). Its server messages
  are sent in their recorded order and rhythm: each after the delay it came after the client's
  message (or, for the greeting, the handshake) live, a gap at most :data:`MAX_GAP_S` (a page's
  heartbeat, a ticker's pushes keep their pace: a client that waits for the server's pings does not
  time out and reconnect). A message no turn matches is a ``miss``: nothing is sent;
* pings are answered with pongs, a close with a close (what the server sent after the
  client's close in the recording is not played: it belonged to that closing handshake);
* a conversation is one connection's: played to a second connection of the episode (a client that
  reconnected), its server messages are not what the live server would have said to a new one (a
  new session, later pushes): the handshake is logged ``again: conversation played again`` and
  counted, as an answer past a changing series is.

Every handshake and every client message is one replay log entry (method ``WS`` for
messages; its ``kind`` that of the handshake), so what the page did not get counts
toward the episode's validity. A handshake with no archived ``101`` and conversation
(or on the mitmproxy engine, which does not carry these tunnels) is refused with a 403
and counted as ``websocket``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..snapshots.volatility import path_group
from ..snapshots.wsrecords import WsMessage, redact_message
from ..validity import AGAIN, again_note
from ..wire.reply import Reply
from ..wire.websocket import (
    BINARY,
    CLOSE,
    PING,
    PONG,
    TEXT,
    FrameError,
    MessageReader,
    accept_key,
    frame,
)
from .canonical import url_host
from .httputil import get_header
from .stream import MAX_GAP_S

__all__ = ["ReplayTunnel", "Turns", "answer_websocket"]

_SEND = {"text": TEXT, "binary": BINARY, "close": CLOSE}
Log = Callable[[str, str, str, "int | None", "str | None", "float | None", "str | None"], None]


class Turns:
    """A recorded conversation as the greeting and the (client message, server answers) turns."""

    def __init__(self, messages: list[WsMessage], canon: Callable[[WsMessage], str | None]) -> None:
        self.greeting: list[WsMessage] = []
        self.turns: list[tuple[WsMessage, list[WsMessage]]] = []
        closing = False  # after the client's close: the server's answers to it are the closing handshake's
        for m in messages:
            if m.side == "client" and m.kind in ("text", "binary"):
                self.turns.append((m, []))
            elif m.side == "client" and m.kind == "close":
                closing = True
            elif m.side == "server" and m.kind in _SEND and not closing:
                (self.turns[-1][1] if self.turns else self.greeting).append(m)
        self.canon = canon
        self._keys = [canon(m) for m, _ in self.turns]
        self.used: set[int] = set()

    def match(self, kind: str, data: bytes) -> tuple[str, list[WsMessage], str | None, float] | None:
        """``(outcome, server messages, note, when)`` for a client message, or None (a miss); the note says
        when the message was sent more often than recorded and the recorded turns answered differently;
        ``when``: the recorded client message's time (what its server messages' delays count from)."""
        exact = [i for i, (m, _) in enumerate(self.turns) if m.kind == kind and m.data == data]
        outcome, found = "exact", exact
        if not found:
            key = self.canon(WsMessage(0, "client", kind, data))
            found = [i for i, k in enumerate(self._keys) if key is not None and k == key]
            outcome = "canonical"
        if not found:
            return None
        i = next((i for i in found if i not in self.used), -1)
        note = None
        if i < 0:
            i = found[-1]
            answers = {tuple((m.kind, m.data) for m in self.turns[j][1]) for j in found}
            if len(answers) > 1:
                note = again_note(len(found))
        self.used.add(i)
        return outcome, self.turns[i][1], note, self.turns[i][0].t


def json_canon(volatile: Callable[[str, Any], bool]) -> Callable[[WsMessage], str | None]:
    """A text message's JSON with volatile keys (``volatile(name, value)``) dropped and keys sorted;
    None for anything else."""
    def drop(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if not volatile(str(k).lower(), v)}
        if isinstance(value, list):
            return [drop(v) for v in value]
        return value

    def canon(m: WsMessage) -> str | None:
        if m.kind != "text":
            return None
        try:
            return json.dumps(drop(json.loads(m.data)), sort_keys=True)
        except ValueError:
            return None
    return canon


class ReplayTunnel:
    """The server side of one replayed websocket (the tunnel of a ``101`` :class:`Reply`)."""

    def __init__(self, turns: Turns, on_message: Callable[[str, str | None], None],
                 prepare: Callable[[WsMessage], WsMessage] | None = None, paced: bool = True) -> None:
        self.turns, self.on_message = turns, on_message
        self.prepare = prepare  # what the archive did to a client message (credential redaction)
        self.reader = MessageReader()
        self.write: Callable[[bytes], None] = lambda _: None
        self.end: Callable[[], None] = lambda: None
        self.closed = False
        self.paced = paced
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, write: Callable[[bytes], None], close: Callable[[], None]) -> None:
        """Called on the connection's event loop (what the recorded delays are waited on)."""
        self.write, self.end = write, close
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # (driven without a loop: the messages go at once)
            self._loop = None
        self._play(self.turns.greeting, 0.0)

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            messages = self.reader.feed(data)
        except FrameError:
            self._close(frame(CLOSE, (1002).to_bytes(2, "big")))
            return
        for m in messages:
            if self.closed:
                return
            if m.opcode == PING:
                self.write(frame(PONG, m.data))
            elif m.opcode == CLOSE:
                self._close(frame(CLOSE, m.data[:2]))
            elif m.opcode in (TEXT, BINARY):
                sent = WsMessage(0, "client", m.kind, m.data)
                if self.prepare is not None:
                    sent = self.prepare(sent)
                got = self.turns.match(sent.kind, sent.data)
                self.on_message(got[0], got[2]) if got else self.on_message("miss", None)
                if got:
                    self._play(got[1], got[3])

    def _play(self, messages: Sequence[WsMessage], since: float) -> None:
        """Send ``messages`` in order, each at its recorded time after ``since`` (the client's message, or the
        handshake), counted from now, each gap at most :data:`MAX_GAP_S`; at once when not paced. Several
        plays (the greeting, each turn) run side by side, as the live server's pushes and answers
        interleaved. Every message is due at the play's start plus its offset, so neither a run of tiny
        gaps nor the timers' own delays add up to another rhythm."""
        if not self.paced or self._loop is None:
            for m in messages:
                if self.closed:
                    return
                self._send(m)
            return
        due, previous, offsets = 0.0, since, []
        for m in messages:
            due += min(max(m.t - previous, 0.0), MAX_GAP_S)
            previous = m.t
            offsets.append(due)
        self._next(messages, offsets, self._loop.time(), 0)

    def _next(self, messages: Sequence[WsMessage], offsets: list[float], start: float, i: int) -> None:
        """Send every message of the play now due (within 2 ms), then wait for the next one's time."""
        assert self._loop is not None
        while i < len(messages) and not self.closed:
            if offsets[i] - (self._loop.time() - start) > 0.002:
                self._loop.call_at(start + offsets[i], self._next, messages, offsets, start, i)
                return
            self._send(messages[i])
            i += 1

    def _send(self, m: WsMessage) -> None:
        if m.kind == "close":
            self._close(frame(CLOSE, m.data))
        else:
            self.write(frame(_SEND[m.kind], m.data))

    def _close(self, last: bytes) -> None:
        self.write(last)
        self.closed = True
        self.end()

    def close(self) -> None:
        """The client's connection ended."""
        self.closed = True


def answer_websocket(responder: Any, method: str, url: str, h: dict[str, str], kind: str) -> Reply | None:
    """A 101 carrying a :class:`ReplayTunnel` (logged), or None: no archived conversation answers it."""
    log = responder._log  # the responder's own bookkeeping, kept in one place
    key = h.get("sec-websocket-key")
    if responder.redactor is not None:
        url = responder.redactor.url(url)
    result = responder.session.match("GET", url, None, None) if key else None
    talk = responder.conversation(result.capture.ref) if result and result.capture else None
    if result is None or talk is None:
        return None
    played = responder.played_again(result.capture.ref)
    note = None
    if played > 1 and any(m.side == "server" and m.kind in ("text", "binary") for m in talk.messages):
        note = f"{AGAIN} conversation played again"  # (one key for set_aside, however many connections)
    log(method, url, result.outcome, 101, matched=result.capture.url, score=result.score, kind=kind, volatile=note)
    if talk.truncated is not None:  # the page got more live than was kept: replayed as far as kept, and counted
        responder.count_truncated(method, url, f"websocket conversation {talk.truncated}")
    messages = talk.messages
    index = responder.index
    rules = index.rules.for_host(url_host(url))
    learned = index.learned.get(path_group("GET", result.capture.url), frozenset())

    def volatile(name: str, value: Any) -> bool:  # the rules of query parameters and body fields
        if rules.is_kept(name):
            return False
        if name in learned or rules.is_volatile_param(name) or rules.is_volatile_field(name):
            return True
        return rules.is_timestamp_param(name) and rules.is_epoch(str(value))

    def on_message(outcome: str, note: str | None) -> None:
        log("WS", url, outcome, None, kind=kind, volatile=note)

    headers = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", accept_key(key or ""))]
    protocol = get_header(responder._prepared(result.capture.ref)[2], "sec-websocket-protocol")
    if protocol:
        headers.append(("Sec-WebSocket-Protocol", protocol))
    red = responder.redactor
    prepare = None if red is None else (lambda m: redact_message(red, m))
    tunnel = ReplayTunnel(Turns(messages, json_canon(volatile)), on_message, prepare)
    return Reply(101, "Switching Protocols", headers, b"", False, "replayed", tunnel=tunnel)
