"""The fast recorder to an HTTP/2 client, as Chromium speaks to it: many streams at once on one
connection, a large body past the flow-control windows, a large POST, and a stream reset while its
upstream answer is still coming; the connection goes on and every answer is the origin's, recorded.
A stream reset while the origin has not answered cancels the upstream fetch: the origin's connection
is closed and nothing is archived for it (an HTTP/1.1 client that closes its connection, too).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading

import httpx

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.testing.h2client import H2Exchange, open_h2


async def _browse(proxy: str, ca_file: str, base: str) -> tuple[list[httpx.Response], httpx.Response]:
    ctx = ssl.create_default_context(cafile=ca_file)
    async with httpx.AsyncClient(proxy=proxy, verify=ctx, http2=True, timeout=20) as client:
        asks = [client.get(f"{base}/api/price?id={i}") for i in range(40)]
        asks += [client.get(base + "/big.bin"), client.post(base + "/api/cart", json={"item": "x" * 200_000, "qty": 3})]
        answers = list(await asyncio.gather(*asks))
        dropped = asyncio.ensure_future(client.get(base + "/big.bin"))
        await asyncio.sleep(0.02)
        dropped.cancel()  # the client resets the stream; the proxy is still fetching its answer
        await asyncio.gather(dropped, return_exceptions=True)
        return answers, await client.get(base + "/chunked")


def test_many_streams_a_large_post_and_a_reset_stream_over_http2(site, ca, tmp_path):
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    archive = ExchangeArchive(snap.writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback"), upstream_ca=site.tls.ca_cert).start()
    got: list = []
    # in a thread of its own: the session's Playwright may hold an event loop in this one
    client = threading.Thread(target=lambda: got.append(asyncio.run(_browse(front.url, str(ca.cert_path),
                                                                           site.https_url))))
    try:
        client.start()
        client.join(60)
    finally:
        front.stop()
    [(answers, after)] = got
    assert {r.http_version for r in answers} == {"HTTP/2"}
    assert [r.status_code for r in answers] == [200] * 42
    assert [r.json()["id"] for r in answers[:40]] == [str(i) for i in range(40)]
    assert answers[40].content == site.big and answers[41].json() == {"items": 3, "item": "x" * 200_000}
    assert after.http_version == "HTTP/2" and after.content == b"chunk-" * 700
    assert not archive.errors and archive.failed is None
    snap.finalize()
    posts = [r for r in iter_records(snap.writer.path) if r.rec_type == "request" and r.http_method == "POST"]
    assert len(posts) == 1 and len(posts[0].payload) > 200_000


class _HangingOrigin:
    """An HTTPS origin (the test site's certificate) that reads each request and never answers;
    ``asked`` is set when a request came, ``cancelled`` when the proxy then closed the connection."""

    def __init__(self, site) -> None:  # noqa: ANN001
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(site.tls.server_cert, site.tls.server_key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.asked, self.cancelled = threading.Event(), threading.Event()
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(raw,), daemon=True).start()

    def _one(self, raw: socket.socket) -> None:
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests.append(data)
                self.asked.set()
                while conn.recv(65536):
                    pass
        except (OSError, ssl.SSLError):
            pass
        self.cancelled.set()

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def _recording_a_hanging_origin(site, ca, tmp_path):  # noqa: ANN001, ANN202
    """(origin, snapshot writer, archive, recording proxy, the origin's authority); all stopped after."""
    origin = _HangingOrigin(site)
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    archive = ExchangeArchive(snap.writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback"), upstream_ca=site.tls.ca_cert).start()
    try:
        yield origin, snap, archive, front, f"127.0.0.1:{origin.port}"
    finally:
        front.stop()
        origin.close()


def test_a_reset_stream_cancels_its_upstream_fetch_and_nothing_is_archived(site, ca, tmp_path):
    import h2.errors

    with _recording_a_hanging_origin(site, ca, tmp_path) as (origin, snap, archive, front, authority):
        s, conn = open_h2(int(front.url.rsplit(":", 1)[1]), ca.cert_path, authority)
        with s:
            conn.send_headers(1, [(":method", "GET"), (":path", "/hang"), (":scheme", "https"),
                                  (":authority", authority)], end_stream=True)
            s.sendall(conn.data_to_send())
            assert origin.asked.wait(20)  # the request went upstream ...
            conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)  # ... and the client gave up on it
            s.sendall(conn.data_to_send())
            assert origin.cancelled.wait(20)  # the proxy closed the origin's connection: the fetch stopped
            # the connection goes on: a stream after it is answered by the (real) site; none for the reset one
            talk = H2Exchange(s, conn)
            assert talk.get(3, "/api/price?id=7", site.https_url.split("://", 1)[1]) == "200"
            assert 1 not in talk.status
    assert len(origin.requests) == 1 and front.cancelled == 1 and front.cancelled_urls == [f"https://{authority}/hang"]
    assert not archive.errors and archive.failed is None
    snap.finalize()
    urls = [r.url for r in iter_records(snap.writer.path) if r.rec_type in ("request", "response")]
    assert not [u for u in urls if u and "/hang" in u] and any(u and "/api/price" in u for u in urls)


def test_an_http11_client_that_closes_cancels_its_upstream_fetch(site, ca, tmp_path):
    with _recording_a_hanging_origin(site, ca, tmp_path) as (origin, snap, archive, front, authority):
        raw = socket.create_connection(("127.0.0.1", int(front.url.rsplit(":", 1)[1])), timeout=20)
        raw.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        assert raw.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        tls = ssl.create_default_context(cafile=str(ca.cert_path)).wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(f"GET /hang HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        assert origin.asked.wait(20)
        tls.close()  # the client gives up before the answer
        assert origin.cancelled.wait(20)
    assert front.cancelled == 1 and not archive.errors
    snap.finalize()
    assert not [r for r in iter_records(snap.writer.path) if r.rec_type in ("request", "response")]


def test_pseudo_fields_that_do_not_make_an_https_url_are_refused(site, ca, tmp_path):
    """RFC 9113 8.3.1: a ``:path`` not starting with ``/`` (glued to the authority, it would name another
    port or host), a scheme this proxy does not carry, a CONNECT (no tunnel in a tunnel) are each a 400 on
    their own stream; none goes upstream, and the connection goes on."""
    with _recording_a_hanging_origin(site, ca, tmp_path) as (origin, snap, archive, front, authority):
        s, conn = open_h2(int(front.url.rsplit(":", 1)[1]), ca.cert_path, authority)
        conn.config.validate_outbound_headers = False  # send what h2 itself would not
        with s:
            talk = H2Exchange(s, conn)
            for stream_id, fields in [
                (1, [(":method", "GET"), (":path", ":1/hang"), (":scheme", "https"), (":authority", "127.0.0.1")]),
                (3, [(":method", "GET"), (":path", "/hang"), (":scheme", "ftp"), (":authority", authority)]),
                (5, [(":method", "CONNECT"), (":authority", authority)]),
            ]:
                conn.send_headers(stream_id, fields, end_stream=True)
                s.sendall(conn.data_to_send())
                while stream_id not in talk.status:
                    talk.pump()
                assert talk.status[stream_id] == "400", fields
            assert talk.get(7, "/api/price?id=7", site.https_url.split("://", 1)[1]) == "200"
    assert origin.requests == [] and not archive.errors
