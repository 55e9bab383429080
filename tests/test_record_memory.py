"""A large body through the real recorder: memory bounded by the stream, not by the body (issue 27).

A loopback origin (this process) serves 64 MiB, once of random bytes and once of one repeated byte; the
recorder (``RecordFront``) runs in a child process that fetches both through itself, reading each as it
comes, and reports the growth of its peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``
before each fetch). The archive is then checked as a user would: the snapshot finalises (a very
compressible record is no decompression bomb), ``warcio check`` passes on its records (digests true), the
records hold the bodies byte for byte, and replay serves them byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import zstandard

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.testing.rawsock import read_head

SIZE = 64 << 20
BODIES = {"/random": os.urandom(SIZE), "/repeated": b"a" * SIZE}
BIN = Path(sys.executable).parent

CHILD = r"""
import hashlib, json, socket, sys, time
from pathlib import Path
from ego2web_replay.guard import GuardPolicy
from ego2web_replay.proxy import project_ca
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.snapshots.snapshot import SnapshotWriter

port, root = int(sys.argv[1]), Path(sys.argv[2])

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

def fetch(path):
    s = socket.create_connection(("127.0.0.1", front.port), timeout=60)
    s.sendall(f"GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, got = got.partition(b"\r\n\r\n")
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
    digest, n = hashlib.sha256(got), len(got)
    while n < length:
        data = s.recv(1 << 20)
        if not data:
            break
        digest.update(data)
        n += len(data)
    s.close()
    return n, digest.hexdigest()

snap = SnapshotWriter(root, "T", compression="zst", source="record")
archive = ExchangeArchive(snap.writer)
front = RecordFront(archive, ca=project_ca(), guard=GuardPolicy(mode="loopback"))
front.start()
fetch("/small")  # warm: every import and buffer of the first exchange
out = {}
for path in ("/random", "/repeated"):
    before = archive.exchanges
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from the current one
    base = hwm()
    n, sha = fetch(path)
    deadline = time.monotonic() + 120
    while archive.exchanges == before and time.monotonic() < deadline:
        time.sleep(0.05)
    out[path] = {"growth": hwm() - base, "received": n, "sha256": sha}
front.stop()
snap.finalize()
out["errors"] = archive.errors
out["snapshot"] = str(snap.path)
print(json.dumps(out))
"""


class _Origin(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        head = read_head(sock, bytearray())
        if head is None:
            return
        body = BODIES.get(head.split(b" ", 2)[1].decode(), b"small")
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                     % len(body))
        view = memoryview(body)
        for start in range(0, len(body), 1 << 20):
            sock.sendall(view[start:start + (1 << 20)])


@pytest.fixture(scope="module")
def origin():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def recorded(origin, ca, tmp_path_factory):
    """The child's report: peak memory growth and what it received per body; the finalised snapshot."""
    root = tmp_path_factory.mktemp("recmem")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", CHILD, str(origin.server_address[1]), str(root)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", list(BODIES))
def test_the_recorders_peak_memory_grows_far_less_than_the_body(recorded, path):
    got = recorded[path]
    assert got["received"] == SIZE and got["sha256"] == hashlib.sha256(BODIES[path]).hexdigest()
    assert got["growth"] < SIZE // 3, f"peak RSS grew {got['growth'] / 2**20:.0f} MiB for a 64 MiB body"
    assert recorded["errors"] == []


def test_the_large_records_are_valid_warc_and_hold_the_bodies(recorded, tmp_path):
    snap = Path(recorded["snapshot"])
    assert (snap / "manifest.json").exists()  # finalised, the 64 MiB of one byte included
    (archive,) = snap.glob("*.warc.zst")
    plain = tmp_path / "plain.warc"
    with archive.open("rb") as src, plain.open("wb") as dst:
        reader = zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
        while piece := reader.read(1 << 20):
            dst.write(piece)
    check = subprocess.run([BIN / "warcio", "check", "-v", plain], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    payloads = {urlsplit(r.url).path: r.payload for r in iter_records(archive) if r.rec_type == "response"}
    for path, body in BODIES.items():
        assert payloads[path] == body


def test_the_large_bodies_replay_byte_for_byte(recorded, origin):
    host = f"127.0.0.1:{origin.server_address[1]}"
    with Replay([Path(recorded["snapshot"])], freeze=False, guard_mode="loopback", engine="fast") as replay:
        port = urlsplit(replay.proxy_url).port
        for path, body in BODIES.items():
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                got = bytearray()
                while data := s.recv(1 << 20):
                    got += data
            head, _, served = bytes(got).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
            assert len(served) == SIZE and hashlib.sha256(served).digest() == hashlib.sha256(body).digest()
