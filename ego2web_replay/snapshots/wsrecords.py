"""Websocket conversations in the WARC: the handshake as a request/response pair, the messages in a metadata record.

A websocket the recorder saw is archived, when it ends, as three consecutive records:

1. ``response``: the ``101 Switching Protocols`` response, headers only (indexed like any
   capture, so the handshake is matched like an HTTP request);
2. ``request``: the handshake request (``GET`` with ``Upgrade: websocket``), as any request;
3. ``metadata``: the conversation, ``Content-Type:`` :data:`CONTENT_TYPE`,
   ``WARC-Target-URI`` the handshake's URL, ``WARC-Concurrent-To`` the 101 response's
   record id. Its block is JSON Lines, one message per line, in the order seen::

     {"t": 0.0132, "from": "client", "type": "text", "text": "hello"}
     {"t": 0.0150, "from": "server", "type": "binary", "base64": "AAEC"}
     {"t": 1.2001, "from": "server", "type": "close", "code": 1000, "reason": ""}

   ``t`` is seconds since the handshake; ``from`` is ``client`` or ``server``; ``type`` is
   ``text``, ``binary``, ``close``, ``ping`` or ``pong``. Payloads are as the application
   sent them (permessage-deflate undone), except that credentials in the client's JSON
   messages are redacted as in JSON request bodies (unless credentials are kept). A conversation cut at the size bound carries
   ``WARC-Truncated: length``.

Other tools skip it safely: a ``metadata`` record is not a capture (pywb, warcio's indexer
and this project's CDXJ index leave it out), and its block digest is checked like any
other by ``warcio check``. (The IIPC proposal for websockets in WARC,
iipc/warc-specifications#115, keeps frames as JSON Lines too, in a ``resource`` record;
a ``resource`` would be indexed and served as the handshake URL's content by replay tools
that do not know it, so this layout uses ``metadata``.)
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["CONTENT_TYPE", "WsMessage", "Conversation", "encode_messages", "decode_messages", "write_conversation",
           "is_conversation", "conversation_of", "conversation_record", "redact_message"]

CONTENT_TYPE = "application/vnd.ego2web-replay.websocket+jsonl"
_KINDS = ("text", "binary", "close", "ping", "pong")


@dataclass(frozen=True)
class WsMessage:
    """One websocket message: when (seconds since the handshake), who sent it, its type and payload."""

    t: float
    side: str  # "client" or "server"
    kind: str  # text, binary, close, ping, pong
    data: bytes


def encode_messages(messages: Iterable[WsMessage]) -> bytes:
    """The JSON Lines block of a conversation (see the module docstring)."""
    lines = []
    for m in messages:
        item: dict[str, Any] = {"t": round(m.t, 6), "from": m.side, "type": m.kind}
        if m.kind == "text":
            item["text"] = m.data.decode("utf-8", "surrogateescape")
            try:
                m.data.decode("utf-8")
            except UnicodeDecodeError:  # not valid text after all: keep the bytes
                del item["text"]
                item["base64"] = base64.b64encode(m.data).decode()
        elif m.kind == "close":
            code = struct.unpack("!H", m.data[:2])[0] if len(m.data) >= 2 else None
            item["code"], item["reason"] = code, m.data[2:].decode("utf-8", "replace")
        else:
            item["base64"] = base64.b64encode(m.data).decode()
        lines.append(json.dumps(item, ensure_ascii=False, separators=(", ", ": ")))
    return "".join(line + "\n" for line in lines).encode("utf-8")


def decode_messages(block: bytes) -> list[WsMessage]:
    """The messages of a conversation block; a line that is not a message raises ``ValueError``."""
    out = []
    for number, line in enumerate(block.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            kind, side = item["type"], item["from"]
            if kind not in _KINDS or side not in ("client", "server"):
                raise ValueError
            if kind == "close":
                data = struct.pack("!H", item["code"]) + item.get("reason", "").encode() if item.get("code") else b""
            elif "text" in item:
                data = item["text"].encode("utf-8")
            else:
                data = base64.b64decode(item.get("base64", ""))
            out.append(WsMessage(float(item["t"]), side, kind, data))
        except (ValueError, KeyError, TypeError, struct.error):
            raise ValueError(f"line {number} is not a websocket message") from None
    return out


def redact_message(red: Any, message: WsMessage) -> WsMessage:
    """``message`` with credentials redacted (``red``: a :class:`~ego2web_replay.redaction.Redactor`):
    the client's JSON text messages, as JSON request bodies are; everything else as it is."""
    if message.side != "client" or message.kind != "text":
        return message
    data = red.body("application/json", message.data)
    return message if data == message.data else dataclasses.replace(message, data=data)


def is_conversation(record: Any, response_id: str | None) -> bool:
    """Whether ``record`` is the conversation of the 101 response ``response_id``."""
    ctype = (record.content_type or "").split(";")[0].strip().lower()
    return (record.rec_type == "metadata" and ctype == CONTENT_TYPE
            and (response_id is None or response_id in record.concurrent_to))


def write_conversation(writer: Any, *, url: str, request_headers: list[tuple[str, str]], status: int, reason: str,
                       response_headers: list[tuple[str, str]], messages: list[WsMessage], truncated: bool,
                       ip: str | None, date: datetime, http_version: str = "HTTP/1.1") -> list[Any]:
    """Write the handshake pair and the conversation record, consecutively (the writer's lock held)."""
    with getattr(writer, "_lock", contextlib.nullcontext()):  # the three lie together (the replay reads them so)
        response, request = writer.write_exchange(
            url=url, method="GET", request_headers=request_headers, request_body=b"", status=status,
            reason=reason, response_headers=response_headers, response_body=b"", http_version=http_version,
            ip=ip, date=date)
        extra = [("WARC-Concurrent-To", response.record_id)] + ([("WARC-Truncated", "length")] if truncated else [])
        talk = writer.write_record("metadata", url, payload=encode_messages(messages), content_type=CONTENT_TYPE,
                                   warc_headers=extra, date=date)
    return [response, request, talk]


def conversation_record(snapshot: Any, entry: Any) -> Any | None:
    """The conversation record archived with the ``101`` capture ``entry`` of ``snapshot`` (a record or
    two after it, see the module docstring); None when there is none or it cannot be read."""
    from ..errors import ArchiveError

    try:
        response = snapshot.record(entry)
        offset = entry.offset + entry.length
        for _ in range(2):
            record = snapshot.record_at(offset)
            if is_conversation(record, response.record_id):
                return record
            offset += record.length
    except (ArchiveError, OSError, ValueError, EOFError):
        return None
    return None


@dataclass(frozen=True)
class Conversation:
    """An archived conversation: its messages, and ``truncated``, the record's ``WARC-Truncated`` (None
    when it was archived whole; else the recorder stopped keeping it, and what the page got live went
    on past the last message here)."""

    messages: list[WsMessage]
    truncated: str | None = None


def conversation_of(snapshot: Any, entry: Any) -> Conversation | None:
    """The conversation of :func:`conversation_record`; None when there is none or it cannot be read."""
    record = conversation_record(snapshot, entry)
    if record is None:
        return None
    try:
        return Conversation(decode_messages(record.payload), record.headers.get("WARC-Truncated"))
    except ValueError:
        return None
