"""Seeded fuzzers: over task files, archives, indexes and manifests (every case ends in a result or one line),
and over the proxy wire (hostile HTTP/1.1 and HTTP/2 clients against both fast proxies).

Each file case mutates a valid input (byte flips, cuts, insertions, huge numbers,
deep nesting, odd ids) and runs the CLI on it in this process. The only
acceptable outcomes are exit 0 or a one-line ``error:``; any other exception
(a traceback) fails the test with the seed and case that produced it.

Each wire case is a hostile input (a header injected with a bare CR or LF, a second request
smuggled by conflicting framing, two Hosts, chunk sizes past the cap, 1-byte chunks, broken
request lines, HTTP/2 pseudo-headers no HTTP/1.1 line may hold, mutated frames ...) sent on its
own connection. Every 20 cases a good client must still be served (on a kept connection and a
fresh one); the process's memory must grow by less than ``WIRE_RSS_BOUND``; no case may stall;
and, through the recorder, an origin with a strict parser of its own must see only well-formed
requests, each of them archived (and nothing archived it did not get), in a snapshot that verifies.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import logging
import os
import random
import re
import shutil
import socket
import socketserver
import ssl
import threading
import traceback
from collections import Counter
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from ego2web_replay.cli import main
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.wire.conn import split_url

SEED = 13
CASES = 300

GOOD_TASKS = [{"id": "t1", "instruction": "find the price", "start_url": "https://shop.example/",
               "allowed_domains": ["shop.example"], "reference_actions": [{"kind": "goto", "url": "https://shop.example/"}]}]

NASTY = [b"[" * 5000, b"{" * 3000, b"9" * 5000, b"-1", b"1e999999", b"\x00\xff\xfe", b'"' + b"\\" * 99 + b'"',
         b"Content-Length: 1000000000000000\r\n", b"\r\n\r\n", b"WARC/1.1\r\n", b"../../etc/hostname", b"/etc/hostname",
         "é😀".encode(), b"null", b"[]", b"{}", b"\xfd\x2f\xb5\x28", b"\x1f\x8b\x08\x00"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        pos = rng.randrange(len(data) + 1) if data else 0
        if op == 0 and data:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1:  # cut
            data = data[:pos]
        elif op == 2:  # insert something nasty
            data[pos:pos] = rng.choice(NASTY)
        elif op == 3 and data:  # delete a span
            data[pos:pos + rng.randint(1, 64)] = b""
        else:  # duplicate a span
            data[pos:pos] = data[max(0, pos - 200):pos]
    return bytes(data)


def _task_variants(rng: random.Random) -> bytes:
    tasks = json.loads(json.dumps(GOOD_TASKS))
    t = tasks[0]
    choice = rng.randrange(6)
    if choice == 0:
        t["id"] = rng.choice(["x" * 300, "../x", "a b", "", ".", "ok"])
    elif choice == 1:
        t["start_url"] = rng.choice(["file:///etc/passwd", "javascript:1", "https://" + "a" * 5000, 12])
    elif choice == 2:
        t["reference_actions"] = [{"kind": rng.choice(["goto", "click", "nope", None]), "x": 10**rng.randint(1, 400)}]
    elif choice == 3:
        t["evidence"] = [{"start": rng.choice([-1, 10**50, "x"]), "end": 1}]
    elif choice == 4:
        t["metadata"] = json.loads("[" * 150 + "]" * 150)
    text = json.dumps(tasks).encode()
    return _mutate(rng, text) if rng.random() < 0.7 else text


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """A small valid snapshot (gzip and zstd) to mutate."""
    root = tmp_path_factory.mktemp("fuzz-seeds")
    out = {}
    for comp in ("gz", "zst", "none"):
        sw = SnapshotWriter(root / comp, "seed", snapshot_id="s1", compression=comp)
        for i in range(3):
            sw.writer.write_exchange(url=f"https://shop.example/p{i}?q={i}", method="GET",
                                     request_headers=[("Accept", "*/*")], request_body=b"", status=200, reason="OK",
                                     response_headers=[("Content-Type", "text/html")],
                                     response_body=f"<html><body>page {i}</body></html>".encode())
        sw.writer.write_exchange(url="https://shop.example/api", method="POST",
                                 request_headers=[("Content-Type", "application/json")],
                                 request_body=b'{"q": {"deep": [1, 2, {"x": "y"}]}}', status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json")], response_body=b"{}")
        sw.finalize()
        out[comp] = sw.path
    return out


def _run(argv: list[str], capsys) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, code, err)
    if code:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert lines and "Traceback" not in err, (argv, err)


def test_fuzz_task_files_archives_indexes_and_manifests(seeds, tmp_path, capsys):
    rng = random.Random(SEED)
    for case in range(CASES):
        kind = case % 5
        work = tmp_path / f"c{case}"
        work.mkdir()
        try:
            if kind == 0:  # a task file
                p = work / rng.choice(["tasks.json", "tasks.jsonl"])
                p.write_bytes(_task_variants(rng))
                _run(["record", str(p), "--snapshots", str(work / "s"), "--task", "nosuch"], capsys)
            elif kind in (1, 2):  # an archive to import
                comp = rng.choice(list(seeds))
                src = next(seeds[comp].glob("archive.warc*"))
                p = work / src.name
                p.write_bytes(_mutate(rng, src.read_bytes()))
                _run(["snapshot", "import", str(p), "--task", "fz", "--snapshots", str(work / "s")], capsys)
            elif kind == 3:  # a snapshot whose index or manifest is damaged
                comp = rng.choice(list(seeds))
                snap = work / "snap" / "seed" / "s1"
                shutil.copytree(seeds[comp], snap)
                target = snap / rng.choice(["index.cdxj", "manifest.json"])
                target.write_bytes(_mutate(rng, target.read_bytes()))
                _run(["snapshot", "verify", str(snap)], capsys)
                _run(["snapshot", "show", str(snap)], capsys)
            else:  # a damaged archive inside a snapshot
                comp = rng.choice(list(seeds))
                snap = work / "snap" / "seed" / "s1"
                shutil.copytree(seeds[comp], snap)
                archive = next(snap.glob("archive.warc*"))
                archive.write_bytes(_mutate(rng, archive.read_bytes()))
                _run(["snapshot", "verify", str(snap)], capsys)
        except AssertionError:
            raise
        except BaseException as e:  # noqa: BLE001 - a traceback is the failure this test hunts
            where = traceback.extract_tb(e.__traceback__)[-3:]
            pytest.fail(f"seed {SEED} case {case} (kind {kind}): {type(e).__name__}: {e} at "
                        + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(where)))
        finally:
            shutil.rmtree(work, ignore_errors=True)


def test_a_gzip_seed_is_valid(seeds):
    data = gzip.decompress(next(seeds["gz"].glob("archive.warc*")).read_bytes())
    assert data.startswith(b"WARC/1.1")


# -- the proxy wire: hostile HTTP/1.1 and HTTP/2 clients against both fast proxies -------------------
WIRE_SEED = 24
WIRE_H1 = 420  # hostile HTTP/1.1 inputs per proxy
WIRE_H2 = 100  # hostile HTTP/2 inputs per proxy
WIRE_RSS_BOUND = 64 << 20  # the process's resident memory grows by less than this over the whole fuzz
GOOD_BODY = {False: b"ok", True: b"<html><body>page 1</body></html>"}  # the origin's answer; the seed snapshot's p1
_STRICT_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+: ?[\t\x20-\x7e\x80-\xff]*")
_STRICT_START = re.compile(rb"[A-Z]+ /[!-~\x80-\xff]* HTTP/1\.1")


class _StrictOrigin(socketserver.BaseRequestHandler):
    """An origin with a parser of its own, stricter than any proxy needs: every request must be one well-formed
    HTTP/1.1 request (one Host, a Content-Length when there is a body, no Transfer-Encoding, no control in any
    line); what is not is kept in ``server.unparsed``, and every request in ``server.got``."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    if buf:
                        self.server.unparsed.append(buf[:200])  # type: ignore[attr-defined]
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            start, *lines = head.split(b"\r\n")
            names = [line.split(b":")[0].lower() for line in lines]
            if (not _STRICT_START.fullmatch(start) or not all(_STRICT_LINE.fullmatch(x) for x in lines)
                    or names.count(b"host") != 1 or names.count(b"content-length") > 1
                    or b"transfer-encoding" in names):
                self.server.unparsed.append(head[:200])  # type: ignore[attr-defined]
                return
            lengths = [line.split(b":", 1)[1].strip() for line in lines if line.lower().startswith(b"content-length:")]
            n = int(lengths[0]) if lengths else 0
            while len(buf) < n:
                data = sock.recv(65536)
                if not data:
                    self.server.unparsed.append(b"a body cut short")  # type: ignore[attr-defined]
                    return
                buf += data
            method, target, _ = start.split(b" ")
            self.server.got.append((method.decode(), unquote_to_bytes(target), buf[:n]))  # type: ignore[attr-defined]
            buf = buf[n:]
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")


def _h1_case(rng: random.Random, authority: str, path: str) -> bytes:
    """One hostile HTTP/1.1 input built around a valid request to ``authority`` (a mutation, a smuggling
    try, a framing conflict, an injected header ...)."""
    url = f"http://{authority}{path}"
    host = f"Host: {authority}\r\n"
    good = f"GET {url} HTTP/1.1\r\n{host}Accept: */*\r\n\r\n".encode()
    second = f"GET {url}?second=1 HTTP/1.1\r\n{host}\r\n".encode()
    inject = rng.choice(["\n", "\r", "\x00", "\r\n ", "\x0b", "\x7f"])
    bodies = [b"q=1", second, b"0\r\n\r\n" + second]
    body = rng.choice(bodies)
    kind = rng.randrange(14)
    if kind == 0:  # a control inside a field value or name: a header injected
        fields = f"X-A: a{inject}Authorization: Bearer injected\r\n" if rng.random() < 0.7 else f"X{inject}A: 1\r\n"
        data = f"GET {url} HTTP/1.1\r\n{host}{fields}\r\n".encode()
    elif kind == 1:  # two Content-Lengths, equal or not; a list; a sign; non-ASCII digits; thousands of digits
        cl = rng.choice([f"{len(body)}\r\nContent-Length: {len(body) + 7}", f"{len(body)}\r\nContent-Length: {len(body)}",
                         f"{len(body)}, {len(body)}", f"+{len(body)}", "\u0663", "9" * 5000, "-1", "0x10",
                         f" {len(body)} ", "1e3", ""])
        data = f"POST {url} HTTP/1.1\r\n{host}Content-Length: {cl}\r\n\r\n".encode() + body
    elif kind == 2:  # Transfer-Encoding beside Content-Length, or not a final chunked
        te = rng.choice(["chunked", "gzip", "chunked, gzip", "gzip, chunked", "identity", "chunked\r\nTransfer-Encoding: chunked",
                         " chunked", "xchunked", "chunked;q=1", ""])
        extra = f"Content-Length: {len(body)}\r\n" if rng.random() < 0.5 else ""
        data = f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: {te}\r\n{extra}\r\n".encode() + b"3\r\nq=1\r\n0\r\n\r\n" + body
    elif kind == 3:  # two Hosts
        data = f"GET {url} HTTP/1.1\r\n{host}Host: other.example\r\n\r\n".encode()
    elif kind == 4:  # chunk sizes past any cap, bad framing, extensions with controls, trailers with a bare LF
        chunks = rng.choice([b"ffffffffffffffff\r\n" + b"x" * 4096, b"8000000\r\n" + b"x" * (1 << 20), b"3\r\nq=1XX0\r\n\r\n",
                             b"3;ext=\x01\r\nq=1\r\n0\r\n\r\n", b"3\r\nq=1\r\n0\r\nX: a\nGET /smuggled HTTP/1.1\r\n\r\n",
                             b"1" * 5000 + b"\r\n", b"3 \r\nq=1\r\n0\r\n\r\n", b"-3\r\nq=1\r\n0\r\n\r\n", b"3\nq=1\n0\n\n"])
        data = f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n".encode() + chunks
    elif kind == 5:  # a body in 1-byte chunks (answered; linear time)
        data = f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n".encode() + b"1\r\nq\r\n" * rng.randint(1, 3000) \
            + b"0\r\n\r\n"
    elif kind == 6:  # a broken request line
        data = rng.choice([f"GET  {url} HTTP/1.1\r\n", f"GET {url} HTTP/1.1 \r\n", f"GET\t{url} HTTP/1.1\r\n",
                           f"GET {url} http/1.1\r\n", f"GET {url} HTTP/2.0\r\n", f"GET {url}\r\n", f"G@T {url} HTTP/1.1\r\n",
                           f"GET {url}\x00x HTTP/1.1\r\n", f"GET {url} HTTP/1.1\n"]).encode() + host.encode() + b"\r\n"
    elif kind == 7:  # folded, spaced, empty or non-token names
        data = f"GET {url} HTTP/1.1\r\n{host}".encode() + rng.choice([b"X: a\r\n b\r\n", b"X : a\r\n", b": a\r\n",
                                                                      b"X(y): a\r\n", b"\xe9: a\r\n", b"X\r\n"]) + b"\r\n"
    elif kind == 8:  # a head past the limit
        data = f"GET {url} HTTP/1.1\r\n{host}X: {'a' * 70_000}\r\n\r\n".encode()
    elif kind == 9:  # CONNECT to what is no host:port
        data = rng.choice(["CONNECT \u00e9.example:443 HTTP/1.1\r\n\r\n", "CONNECT a.example HTTP/1.1\r\n\r\n",
                           "CONNECT a.example:999999 HTTP/1.1\r\n\r\n", "CONNECT [::1:443 HTTP/1.1\r\n\r\n",
                           "CONNECT a.example:443\x00 HTTP/1.1\r\n\r\n"]).encode()
    elif kind == 10:  # pipelined: good, hostile, good
        data = good + _h1_case(rng, authority, path) + good
    elif kind == 11:  # Expect with a body that never comes, or comes
        data = f"POST {url} HTTP/1.1\r\n{host}Expect: 100-continue\r\nContent-Length: 3\r\n\r\n".encode() + rng.choice([b"", b"q=1"])
    else:  # byte flips, cuts, insertions and duplications of a valid request (pipelined or with a body)
        base = rng.choice([good, good + second, f"POST {url} HTTP/1.1\r\n{host}Content-Length: 3\r\n\r\nq=1".encode()])
        data = _mutate(rng, base)
    return data


def _exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data``, half-close, read until the proxy closes (a stall past ``timeout`` fails the test)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except TimeoutError:
            raise
        except OSError:  # refused before all of it was read: the proxy answered and closed
            pass
        out = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                out += chunk
    return out


def _h2_case(rng: random.Random, port: int, ca_file: str, scheme: str, authority: str, path: str,
             said: list[str]) -> None:
    """One hostile HTTP/2 input through a CONNECT tunnel: pseudo-headers no HTTP/1.1 line may hold, fields
    h2 must refuse, conflicting lengths, bodies past their length, resets, garbage frames; read until the
    proxy has answered every stream, reset it, or closed the connection (a stall fails the test)."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.sendall(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
    assert raw.recv(100).startswith(b"HTTP/1.1 200 ")
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.set_alpn_protocols(["h2"])
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=False))
        conn.initiate_connection()
        method, spath, auth = b"GET", path.encode(), authority.encode()
        fields: list[tuple[bytes, bytes]] = [(b"accept", b"*/*")]
        body, end = b"", True
        kind = rng.randrange(8)
        if kind == 0:
            spath = rng.choice([b"/a b", b"/a HTTP/1.1\r\nX: y", b"/a\x00", b"/\x7f", b"/a\tb", b""])
        elif kind == 1:
            method = rng.choice([b"GET X", b"G\r\nET", b"", b"GET\x00", b"G(T"])
        elif kind == 2:
            auth = rng.choice([b"a b", b"a\r\nb", b"", b"\xe9.example", authority.encode() + b"/x"])
        elif kind == 3:
            fields.append(rng.choice([(b"x", b"a\r\nauthorization: injected"), (b"x", b"a\x00"), (b"x y", b"1"),
                                      (b"X-Upper", b"1"), (b"connection", b"close"), (b"host", b"other.example"),
                                      (b"te", b"gzip"), (b"transfer-encoding", b"chunked"), (b"host", b"\xe9:1"),
                                      (b"host", b"127.0.0.1:99999")]))
            if rng.random() < 0.3:  # the same Host twice (h2 lets it through when it matches :authority)
                fields += [(b"host", auth), (b"host", auth)]
        elif kind == 4:
            method, body = b"POST", b"q=1" * rng.randint(0, 5)
            fields += rng.choice([[(b"content-length", b"1"), (b"content-length", b"2")], [(b"content-length", b"0")],
                                  [(b"content-length", b"x")], [(b"content-length", b"9" * 5000)]])
            end = False
        headers = [(b":method", method), (b":scheme", scheme.encode()), (b":authority", auth), (b":path", spath), *fields]
        said[:] = [f"h2 kind {kind}: {headers!r} {body[:40]!r}"]
        with contextlib.suppress(h2.exceptions.ProtocolError):
            conn.send_headers(1, headers, end_stream=end and kind != 5)
            if not end:
                conn.send_data(1, body, end_stream=True)
            if kind == 5:  # reset before the end
                conn.reset_stream(1)
        out = conn.data_to_send()
        if kind == 6:
            out = _mutate(rng, out)
        elif kind == 7:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            s.sendall(out)
            if kind == 5:
                return
            if kind >= 6:  # frames cut or garbled may leave the proxy waiting for more: say there is no more
                with socket.socket(fileno=os.dup(s.fileno())) as tcp:
                    tcp.shutdown(socket.SHUT_WR)
            while True:
                data = s.recv(65536)
                if not data:
                    return
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    return
                s.sendall(conn.data_to_send())
                for ev in events:
                    if isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)):
                        return


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _client(port: int, url: str, ca_file: str) -> http.client.HTTPConnection:
    """A keep-alive client of the proxy for ``url`` (https through a CONNECT tunnel)."""
    if not url.startswith("https://"):
        return http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                       context=ssl.create_default_context(cafile=ca_file))
    conn.set_tunnel(split_url(url)[1], 443)
    return conn


def _served(port: int, url: str, kept: http.client.HTTPConnection, ca_file: str) -> None:
    """A good client is served, on its kept-alive connection and on a fresh one."""
    for conn in (kept, _client(port, url, ca_file)):
        conn.request("GET", url if url.startswith("http://") else split_url(url)[2])
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, GOOD_BODY[url.startswith("https://")]), url


def _fuzz_proxy(port: int, ca_file: str, authority: str, path: str, good_url: str, scheme: str) -> None:
    rng = random.Random(WIRE_SEED)
    kept = _client(port, good_url, ca_file)
    before = _rss()
    for case in range(WIRE_H1 + WIRE_H2):
        said: list[str] = []
        try:
            if case < WIRE_H1:
                data = _h1_case(rng, authority, path)
                said[:] = [repr(data[:300])]
                _exchange(port, data)
            else:
                _h2_case(rng, port, ca_file, scheme, authority, path, said)
        except TimeoutError:
            pytest.fail(f"seed {WIRE_SEED} case {case}: the proxy stalled (no answer, no close within 10 s): {said}")
        if case % 20 == 19:
            _served(port, good_url, kept, ca_file)
    _served(port, good_url, kept, ca_file)
    assert _rss() - before < WIRE_RSS_BOUND
    kept.close()


def _no_error_logged(caplog) -> None:
    """Nothing the proxies logged as an error (a traceback in ``data_received``, a failed archive write)."""
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def test_fuzz_the_recording_proxy_wire(ca, tmp_path, capsys, caplog):
    """Hostile clients (HTTP/1.1 and HTTP/2) through the recorder: a good client stays served, memory stays
    bounded, the origin gets only well-formed requests, each of them archived unless its client went away first
    (then counted as cancelled), and the snapshot verifies."""
    from ego2web_replay.guard import GuardPolicy
    from ego2web_replay.recorder.addon import ExchangeArchive
    from ego2web_replay.recorder.front import RecordFront

    origin = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _StrictOrigin)
    origin.daemon_threads = True
    origin.got, origin.unparsed = [], []  # type: ignore[attr-defined]
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    authority = f"127.0.0.1:{origin.server_address[1]}"
    snap = SnapshotWriter(tmp_path / "snaps", "fuzz", compression="zst", source="record")
    archive = ExchangeArchive(snap.writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback")).start()
    try:
        _fuzz_proxy(front.port, str(ca.cert_path), authority, "/p?x=1", f"http://{authority}/good", "http")
    finally:
        front.stop()
        origin.shutdown()
        origin.server_close()
    assert origin.unparsed == []
    snap.finalize()
    archived = [(r.http_method, unquote_to_bytes(split_url(r.url)[2]), r.payload)
                for r in iter_records(snap.writer.path) if r.rec_type == "request"]
    # every request the origin got is archived, but for those whose client went away before the answer
    # (a hostile input after a good request closes the connection): their fetch was cancelled, unarchived
    unarchived = Counter(origin.got) - Counter(archived)
    assert not Counter(archived) - Counter(origin.got) and len(origin.got) > WIRE_H1 // 20
    assert sum(unarchived.values()) <= front.cancelled, (unarchived, front.cancelled)
    cancelled_paths = Counter(unquote_to_bytes(split_url(u)[2]) for u in front.cancelled_urls)
    assert not Counter(path for _, path, _ in unarchived.elements()) - cancelled_paths
    assert main(["snapshot", "verify", str(snap.path)]) == 0, capsys.readouterr()
    _no_error_logged(caplog)


def test_fuzz_the_replay_proxy_wire(ca, seeds, caplog):
    """The same hostile clients against the fast replay: a good client stays served, memory stays bounded."""
    from ego2web_replay.replay.session import Replay

    with Replay([seeds["zst"]], engine="fast", freeze=False) as replay:
        port = int(replay.proxy_url.rsplit(":", 1)[1])
        _fuzz_proxy(port, str(replay.ca_file), "shop.example", "/p1?q=1", "https://shop.example/p1?q=1", "https")
    _no_error_logged(caplog)
