"""RFC 6455 framing (wire/websocket.py) and the conversation's JSON Lines (snapshots/wsrecords.py), checked
against the frames the ``websockets`` package writes (its sans-I/O protocol, permessage-deflate on)."""

from __future__ import annotations

import struct
import zlib

import pytest
from websockets.client import ClientProtocol
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from ego2web_replay.snapshots.wsrecords import WsMessage, decode_messages, encode_messages
from ego2web_replay.wire.websocket import (
    BINARY,
    PING,
    TEXT,
    FrameError,
    MessageReader,
    accept_key,
    deflate_agreed,
    frame,
)


def _client(deflate: bool) -> ClientProtocol:
    """A ``websockets`` client already open (its handshake skipped), compressing when ``deflate``."""
    from websockets.protocol import OPEN

    proto = ClientProtocol(parse_uri("ws://127.0.0.1/x"),
                           extensions=[ClientPerMessageDeflateFactory()] if deflate else None)
    proto.state = OPEN
    if deflate:
        proto.extensions = [ClientPerMessageDeflateFactory().process_response_params([], [])]
    return proto


def test_messages_from_websockets_frames_fragmented_masked_and_compressed():
    proto = _client(deflate=True)
    proto.send_text(b"first " * 50)
    proto.send_binary(bytes(range(256)) * 300)  # over 64 KiB: a 64-bit length
    proto.send_text(b"frag", fin=False)
    proto.send_ping(b"p")  # a control frame between fragments
    proto.send_continuation(b"mented", fin=True)
    proto.send_text(b"first " * 50)  # the same again: decoded with the kept context
    wire = b"".join(proto.data_to_send())
    assert wire[0] & 0x40 and b"first" not in wire  # compressed (RSV1 set)
    reader = MessageReader(deflate=True)
    got = [m for i in range(0, len(wire), 7) for m in reader.feed(wire[i:i + 7])]  # in small pieces
    assert [(m.opcode, m.data) for m in got] == [
        (TEXT, b"first " * 50), (BINARY, bytes(range(256)) * 300), (PING, b"p"), (TEXT, b"fragmented"),
        (TEXT, b"first " * 50)]


def test_frames_written_read_back_and_bad_framing_refused():
    for mask in (False, True):
        for size in (0, 125, 126, 65535, 65536):
            data = bytes(size % 251 for _ in range(size))
            [m] = MessageReader().feed(frame(BINARY, data, mask=mask))
            assert m.data == data
    with pytest.raises(FrameError):
        MessageReader().feed(b"\x83\x00")  # opcode 3 is reserved
    with pytest.raises(FrameError):
        MessageReader().feed(b"\x80\x01x")  # a continuation of nothing
    with pytest.raises(FrameError):
        MessageReader().feed(b"\xc1\x01x")  # compressed, but nothing agreed it
    with pytest.raises(FrameError):
        MessageReader(max_message=10).feed(frame(TEXT, b"x" * 11))
    bomb = zlib.compressobj(wbits=-15)
    packed = (bomb.compress(b"\0" * 10_000_000) + bomb.flush(zlib.Z_SYNC_FLUSH))[:-4]
    with pytest.raises(FrameError, match="over 1000000"):  # 10 MB from 10 KB: stopped at the bound
        MessageReader(deflate=True, max_message=1_000_000).feed(b"\xc2" + frame(BINARY, packed)[1:])
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 section 1.3
    assert deflate_agreed("permessage-deflate; client_max_window_bits=15") and not deflate_agreed("x-webkit")
    assert Frame(Opcode.TEXT, b"hi").serialize(mask=False, extensions=[]) == frame(TEXT, b"hi")


def test_conversation_lines_round_trip():
    messages = [WsMessage(0.0, "server", "text", "héllo".encode()), WsMessage(0.5, "client", "binary", b"\x00\xff"),
                WsMessage(0.6, "client", "text", b"\xff not utf-8"), WsMessage(0.7, "client", "ping", b"p"),
                WsMessage(1.0, "server", "close", struct.pack("!H", 1001) + b"going"),
                WsMessage(1.1, "client", "close", b"")]
    block = encode_messages(messages)
    assert block.decode().splitlines()[0] == '{"t": 0.0, "from": "server", "type": "text", "text": "héllo"}'
    assert decode_messages(block) == messages
    with pytest.raises(ValueError, match="line 1"):
        decode_messages(b'{"t": 0, "from": "nobody", "type": "text", "text": ""}\n')
