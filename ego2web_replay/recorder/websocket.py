"""Recording a websocket: the conversation read off the bytes passed through, archived when it ends.

:class:`WebsocketTap` sits on a ``101`` tunnel of the recording front end. The
bytes go through unchanged, both ways; the tap reads whole messages out of each
direction (:class:`~ego2web_replay.wire.websocket.MessageReader`, permessage-deflate
undone) with the time since the handshake, and when the tunnel closes (either side,
or the recorder stopping) archives the handshake and the conversation through
:meth:`~.addon.ExchangeArchive.archive` (the layout: :mod:`ego2web_replay.snapshots.wsrecords`).
A conversation over ``max_bytes`` (as archived; :func:`conversation_bound` by default), or
whose framing cannot be read, is archived up to there and marked truncated; the second also
becomes an upstream error of the recording.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

from ..limits import max_record_bytes
from ..snapshots.wsrecords import WsMessage
from ..web import get_header
from ..wire.websocket import FrameError, MessageReader, deflate_agreed
from .addon import ExchangeArchive

__all__ = ["WebsocketTap", "MAX_CONVERSATION", "conversation_bound", "is_websocket"]

MAX_CONVERSATION = 64 * 1024 * 1024
_LINE_BYTES = 96  # a message's JSON line beside its payload (time, side, type, quoting)


def conversation_bound() -> int:
    """The largest conversation archived, in JSON Lines bytes: 64 MiB, or half of what the snapshot
    reader accepts as one record (``EGO2WEB_MAX_RECORD_BYTES``) when that is less."""
    return min(MAX_CONVERSATION, max_record_bytes() // 2)


def is_websocket(request_headers: list[tuple[str, str]]) -> bool:
    return (get_header(request_headers, "upgrade") or "").strip().lower() == "websocket"


class WebsocketTap:
    """Reads the messages of one websocket as its bytes pass; archives them once, at :meth:`finish`."""

    def __init__(self, archive: ExchangeArchive, *, url: str, request_headers: list[tuple[str, str]], status: int,
                 reason: str, response_headers: list[tuple[str, str]], http_version: str, ip: str | None,
                 started: float, authority: str | None, max_bytes: int | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.archive, self.url, self.started, self.clock = archive, url, started, clock
        self.head: dict[str, Any] = dict(request_headers=request_headers, status=status, reason=reason,
                         response_headers=response_headers, http_version=http_version, ip=ip, authority=authority)
        deflate = deflate_agreed(get_header(response_headers, "sec-websocket-extensions"))
        self.messages: list[WsMessage] = []
        self.max_bytes, self.size = max_bytes or conversation_bound(), 0
        self.readers = {side: MessageReader(deflate=deflate, max_message=self.max_bytes)
                        for side in ("client", "server")}
        self.truncated = False
        self.done = False

    def client(self, data: bytes) -> None:
        """Bytes the client sent (on their way to the origin)."""
        self._feed("client", data)

    def server(self, data: bytes) -> None:
        """Bytes the origin sent (on their way to the client)."""
        self._feed("server", data)

    def _feed(self, side: str, data: bytes) -> None:
        if self.truncated or self.done:
            return
        try:
            got = self.readers[side].feed(data)
        except (FrameError, zlib.error) as e:
            self.truncated = True
            self.archive.note_error(self.url, f"websocket {side} framing unreadable, archived up to here: {e}")
            return
        t = self.clock() - self.started
        for m in got:
            self.size += len(m.data) * 4 // 3 + _LINE_BYTES  # as archived: base64 at worst, and its line
            if self.size > self.max_bytes:
                self.truncated = True
                return
            self.messages.append(WsMessage(t, side, m.kind, m.data))

    def finish(self) -> None:
        """Archive the handshake and the conversation (once; later calls do nothing), in this thread."""
        if not self.done:
            self.done = True
            self.archive.archive(**self._exchange())

    async def finished(self) -> None:
        """:meth:`finish` on the archive's writer thread (:meth:`~.addon.ExchangeArchive.archive_async`)."""
        if not self.done:
            self.done = True
            await self.archive.archive_async(**self._exchange())

    def _exchange(self) -> dict[str, Any]:
        return dict(url=self.url, method="GET", request_body=b"", response_body=b"", started=self.started,
                    websocket=(self.messages, self.truncated), **self.head)
